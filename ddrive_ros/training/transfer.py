"""Start a model from another schema's checkpoint: every weight that fits is copied, the rest keep their
random initialisation.

The two models share an architecture (the same `model` config: vision encoder, backbone layers) and differ
in their vocabulary (each schema builds its own tokenizer). What is copied:

- every tensor of the same name and shape outside the vocabulary-sized ones (vision encoder, ego encoder,
  every backbone layer, the final norm);
- rows of the vocabulary-sized tensors (token embedding, the two output heads) for the tokens both
  tokenizers hold, matched by their string (`<nav:TURN_LEFT>`, punctuation, `trajectory`, ...).

Used to give the full model a backbone that already reads the road's bend from the cameras
(`trajectory_only_tiny` learnt it; the full model's own training learns to read it off its text instead:
docs/training.md, "why y = 0 at curves"). The report says what was copied, so a mismatch that copies
nothing is an error rather than a silently random model.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

log = logging.getLogger(__name__)

VOCAB_TENSORS = ("backbone.embed.weight", "backbone.head.weight", "backbone.action_head.weight")


@dataclass
class TransferReport:
    copied: list[str] = field(default_factory=list)  # whole tensors
    shared_tokens: int = 0  # rows copied in each vocabulary tensor
    skipped: list[str] = field(default_factory=list)  # target tensors left at their initialisation, with why
    copied_weights: int = 0
    total_weights: int = 0

    def summary(self) -> str:
        return (f"copied {len(self.copied)} tensors whole and {self.shared_tokens} shared token rows: "
                f"{self.copied_weights} of {self.total_weights} weights "
                f"({100.0 * self.copied_weights / max(1, self.total_weights):.1f}%); kept at init: "
                + (", ".join(self.skipped) if self.skipped else "nothing"))


def transfer_weights(target, source) -> TransferReport:
    """Copy `source`'s weights into `target` (both checkpoint Bundles) where they fit; returns the report.
    Raises if the backbones differ in shape (nothing but the embeddings would fit) or no tensor is copied."""
    if target.config.to_dict()["backbone"] != source.config.to_dict()["backbone"]:
        raise ValueError("transfer needs the same backbone config; got "
                         f"{source.config.to_dict()['backbone']} (source) and {target.config.to_dict()['backbone']} (target)")
    src = source.model.state_dict()
    dst = target.model.state_dict()
    report = TransferReport(total_weights=sum(v.numel() for v in dst.values() if v.is_floating_point()))
    pairs = [(target.tokenizer.id(t), source.tokenizer.id(t)) for t in target.tokenizer.tokens if source.tokenizer.has(t)]
    report.shared_tokens = len(pairs)
    ti, si = (torch.tensor(list(ix), dtype=torch.long) for ix in zip(*pairs)) if pairs else (None, None)
    new = {}
    for name, value in dst.items():
        if name in VOCAB_TENSORS:
            if name not in src:
                report.skipped.append(f"{name} (not in source)")
                continue
            rows = value.clone()
            if pairs:
                rows[ti] = src[name][si].to(rows.dtype)
                report.copied_weights += len(pairs) * value.shape[1]
            new[name] = rows
        elif name in src and src[name].shape == value.shape:
            new[name] = src[name].to(value.dtype)
            report.copied.append(name)
            if value.is_floating_point():
                report.copied_weights += value.numel()
        else:
            report.skipped.append(f"{name} ({'shape differs' if name in src else 'not in source'})")
    if not report.copied:
        raise ValueError("transfer copied no tensor: the source checkpoint shares no weights with this model")
    target.model.load_state_dict({**dst, **new})
    log.info("transfer: %s", report.summary())
    return report
