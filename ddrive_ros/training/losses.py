"""Dual-stream objective on one set of weights: L = 0.5 * L_AR + 0.5 * L_diffusion,
section-weighted cross-entropy over labelled editable positions, logits restricted to the
tokens allowed at each position (as decoding restricts them). Optional block distillation:
symmetric Jensen-Shannon divergence to a smaller-block teacher on the same corrupted sequence.

Repair (AutoEdit training): in the rows given `repair_ids`, the noisy stream's trajectory holds a
perturbed expert trajectory, fully visible instead of masked, and every trajectory position the
block can predict is supervised to the expert token (changed or not: keeping a right token is
learnt as much as fixing a wrong one). This is the edit mode's input at inference; it costs no
extra forward.

Own drafts: `own_drafts` gives, for chosen rows, the model's own one-forward draft of the trajectory
(every trajectory token masked, the earlier sections given, sampled from the allowed tokens at a
temperature), the kind of error the model itself makes; used as repair inputs in place of a
hand-made perturbation, it costs one no-grad forward over those rows."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.masks import dual_stream_mask
from ddrive_ros.training.noise import corrupt, section_weights


@dataclass
class LossParts:
    total: torch.Tensor
    ar: float
    diffusion: float
    distill: float
    repair: float = 0.0


class DualStreamLoss:
    def __init__(self, layout: Layout, prompt_len: int, device: torch.device | str = "cpu", bin_sigma: float = 0.0,
                 section_weight_overrides: dict[str, float] | None = None):
        self.layout = layout
        self.p = prompt_len
        self.length = layout.length
        mask, positions = dual_stream_mask(prompt_len, layout)
        self.mask = mask[None].to(device)
        self.positions = positions.to(device)
        act = torch.as_tensor(layout.action)
        self.action = torch.cat([torch.zeros(prompt_len, dtype=torch.bool), act, act]).to(device)
        self.allowed = torch.as_tensor(layout.allowed).to(device)  # (L, V)
        self.weight = torch.as_tensor(section_weights(layout, section_weight_overrides)).to(device)
        block = torch.as_tensor(layout.block)
        same_block_prev = torch.zeros(self.length, dtype=torch.bool)
        same_block_prev[1:] = block[1:] == block[:-1]
        self.diffusable = same_block_prev.to(device)  # position j predicted inside its own noisy block
        self.mask_id = layout.tokenizer.mask_id
        names = layout.schema.section_names
        traj = names.index("trajectory") if "trajectory" in names else -1
        self.trajectory = (torch.as_tensor(layout.section) == traj).to(device) & \
            torch.as_tensor(layout.editable).to(device)
        # Ordinal soft targets for bin tokens: a bin one step off is nearly right, so the target is a
        # Gaussian over neighbouring bins (sigma in bins) instead of a one-hot. Digits stay one-hot.
        self.soft = None
        self.bin_sigma = 0.0
        self._bin_index = None
        self._device = device
        if "bin" in layout.group_names:
            tok = layout.tokenizer
            index = torch.full((len(tok),), -1.0)
            for t in tok.tokens:
                if t.startswith("<bin_") and t.endswith(">"):
                    index[tok.id(t)] = float(t[5:-1])
            self._bin_index = index
        self.set_bin_sigma(bin_sigma)

    def set_bin_sigma(self, sigma: float) -> None:
        """Soft-target width in bins; 0 (or a schema without bins): one-hot targets. Annealing calls this."""
        if self._bin_index is None or sigma <= 0:
            self.soft, self.bin_sigma = None, 0.0
            return
        if sigma == self.bin_sigma and self.soft is not None:
            return
        index = self._bin_index
        is_bin = index >= 0
        d = index[:, None] - index[None, :]
        soft = torch.exp(-0.5 * (d / sigma) ** 2) * is_bin[:, None] * is_bin[None, :]
        soft = torch.where(is_bin[:, None], soft / soft.sum(-1, keepdim=True).clamp_min(1e-12), torch.eye(len(index)))
        self.soft = soft.to(self._device)  # (V, V): row = target token, column = credited token
        self.bin_sigma = float(sigma)

    @torch.no_grad()
    def own_drafts(self, model: DrivingVLA, prompt: torch.Tensor, ids: torch.Tensor, labelled: torch.Tensor,
                   generator: torch.Generator, temperature: float = 1.0) -> torch.Tensor:
        """(B, L) ids whose labelled trajectory tokens are the model's own draft of them."""
        traj = self.trajectory[None] & labelled
        noisy = torch.where(traj, torch.full_like(ids, self.mask_id), ids)
        logits = model.forward_full(prompt, torch.cat([ids, noisy], 1), self.mask, self.action, self.positions)
        p, n = self.p, self.length
        # a block's first position is predicted by the causal stream (clean tokens before it), the rest
        # inside the masked block
        pred = torch.where(self.diffusable[None, :, None], logits[:, p + n - 1:p + 2 * n - 1], logits[:, p - 1:p + n - 1])
        pred = pred.float().masked_fill(~self.allowed[None], float("-inf"))
        if temperature <= 0:
            tok = pred.argmax(-1)
        else:
            probs = torch.softmax(pred / temperature, -1)
            tok = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).view(ids.shape)
        return torch.where(traj, tok, ids)

    def ce(self, logits: torch.Tensor, target: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        logits = logits.float().masked_fill(~self.allowed[None], -1e4)
        if self.soft is None:
            ce = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        else:
            ce = -(self.soft[target] * torch.log_softmax(logits, -1)).sum(-1)
        w = self.weight[None] * select
        return (ce * w).sum() / w.sum().clamp_min(1.0)

    def __call__(self, model: DrivingVLA, prompt: torch.Tensor, ids: torch.Tensor, labelled: torch.Tensor,
                 generator: torch.Generator, teacher: tuple[DrivingVLA, "DualStreamLoss"] | None = None,
                 distill_weight: float = 0.0, repair_ids: torch.Tensor | None = None,
                 repair_only: bool = False, draft_rows: torch.Tensor | None = None,
                 clean_input: torch.Tensor | None = None) -> LossParts:
        """`repair_ids` (B, L): perturbed expert ids, or a negative id in rows that are not repair rows.
        `repair_only`: the loss is the repair term alone (no AR or diffusion term anywhere).
        `draft_rows` (B,) bool: rows whose noisy stream masks every labelled trajectory position, the input of
        speculative decoding's first draft (training/self_targets.py); repair rows still take their own input.
        `clean_input` (B, L): what the causal stream reads instead of `ids` (training/prefix_noise.py); it still
        learns `ids`."""
        noisy, masked = corrupt(ids, labelled, self.layout, self.mask_id, generator)
        if draft_rows is not None:
            full = draft_rows[:, None] & self.trajectory[None] & labelled
            noisy = torch.where(full, torch.full_like(noisy, self.mask_id), noisy)
            masked = masked | full
        repair_sel = None
        if repair_ids is not None:
            rows = (repair_ids >= 0).all(1, keepdim=True)
            in_traj = rows & self.trajectory[None]
            noisy = torch.where(in_traj, repair_ids.clamp_min(0), noisy)
            masked = masked & ~in_traj
            repair_sel = in_traj & labelled & self.diffusable[None]
        clean = ids if clean_input is None else clean_input
        logits = model.forward_full(prompt, torch.cat([clean, noisy], 1), self.mask, self.action, self.positions)
        p, n = self.p, self.length
        editable = torch.as_tensor(self.layout.editable, device=ids.device)[None]
        ar = self.ce(logits[:, p - 1:p + n - 1], ids, labelled & editable)
        diff_logits = logits[:, p + n - 1:p + 2 * n - 1]
        diff_sel = masked & self.diffusable[None]
        if repair_sel is not None:
            diff_sel = diff_sel | repair_sel
        diff = self.ce(diff_logits, ids, diff_sel)
        total = 0.5 * ar + 0.5 * diff
        repair = float(self.ce(diff_logits.detach(), ids, repair_sel)) if repair_sel is not None else 0.0
        if repair_only:
            if repair_sel is None:
                raise ValueError("repair_only needs repair rows (repair > 0)")
            total = self.ce(diff_logits, ids, repair_sel)
        js = torch.zeros(())
        if teacher is not None and distill_weight > 0:
            t_model, t_loss = teacher
            with torch.no_grad():
                t_logits = t_model.forward_full(prompt, torch.cat([ids, noisy], 1), t_loss.mask, t_loss.action, t_loss.positions)
            sel = diff_sel & t_loss.diffusable[None]
            js = symmetric_js(diff_logits, t_logits[:, p + n - 1:p + 2 * n - 1], self.allowed, sel)
            total = total + distill_weight * js
        return LossParts(total, float(ar.detach()), float(diff.detach()), float(js.detach()), repair)


def symmetric_js(student: torch.Tensor, teacher: torch.Tensor, allowed: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence between the two distributions at selected positions (mean)."""
    ls = torch.log_softmax(student.float().masked_fill(~allowed[None], -1e4), -1)
    lt = torch.log_softmax(teacher.float().masked_fill(~allowed[None], -1e4), -1)
    m = torch.logsumexp(torch.stack([ls, lt]), 0) - torch.log(torch.tensor(2.0))
    js = 0.5 * ((ls.exp() * (ls - m)).sum(-1) + (lt.exp() * (lt - m)).sum(-1))
    return (js * select).sum() / select.sum().clamp_min(1)
