"""Prefix noise: the causal stream reads a trajectory whose bin tokens are moved a few bins, and still learns the
true next token, so its prediction stops copying a small error in the waypoint before it.

Why: speculative decoding's verifier is the causal stream's argmax given the draft before each position. When
it corrects waypoint k's x by d bins, its own predictions for the later waypoints (the next draft, made from the
wrong x_k) are off by about d too (correlation 0.97, docs/training.md, "why speculative decoding stops near 2x"),
so each verification after the first confirms about one waypoint. A causal stream that predicts x_(k+1) from the
cameras rather than from the exact bin of x_k keeps its next draft right after a correction: more tokens per
verification. Verification stays exact either way (greedy output is the new model's AR); what has to be measured
is the forward count and whether the plans got worse.

What: with `TrainConfig.prefix_noise` p, every labelled bin token of the clean (causal) stream's input is moved by
an integer uniform in [-bins, bins] (nonzero) with probability p, clamped to its coordinate's range; the targets
and the noisy (diffusion) stream are unchanged.
"""
from __future__ import annotations

import numpy as np
import torch

from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import bin_token

BIN_GROUP = "bin"


class PrefixNoise:
    """Moves bin tokens by a few bins; positions without bins are never touched."""

    def __init__(self, layout: Layout):
        counts = np.zeros(layout.length, dtype=np.int64)
        for i, slot in enumerate(layout.slots):
            if slot is not None and slot.group == BIN_GROUP:
                counts[i] = len(slot.allowed)
        if not counts.any():
            raise ValueError(f"prefix noise needs bin tokens; schema {layout.schema.name!r} has none")
        tok = layout.tokenizer
        self.count = torch.as_tensor(counts)  # (L,) bins of each position's coordinate, 0: not a bin
        self.id_of = torch.tensor([tok.id(bin_token(i)) for i in range(int(counts.max()))])
        self.index = torch.full((len(tok),), -1, dtype=torch.long)  # token id -> bin index, -1: not a bin
        self.index[self.id_of] = torch.arange(len(self.id_of))

    def __call__(self, ids: torch.Tensor, labelled: torch.Tensor, p: float, bins: int,
                 generator: torch.Generator) -> torch.Tensor:
        if not 0.0 <= p <= 1.0 or int(bins) != bins or bins < 1:
            raise ValueError(f"prefix noise needs a probability in [0, 1] and whole bins >= 1, got {p}, {bins}")
        device = ids.device
        count = self.count.to(device)
        index = self.index.to(device)[ids]
        chosen = (torch.rand(ids.shape, generator=generator).to(device) < p) & labelled & (count[None] > 0) & (index >= 0)
        step = torch.randint(1, int(bins) + 1, ids.shape, generator=generator).to(device)
        sign = torch.where(torch.rand(ids.shape, generator=generator).to(device) < 0.5, -1, 1)
        moved = torch.minimum((index + sign * step).clamp_min(0), count[None] - 1)
        return torch.where(chosen, self.id_of.to(device)[moved.clamp_min(0)], ids)
