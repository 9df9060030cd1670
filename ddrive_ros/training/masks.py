"""The dual-stream attention mask used in training.

Sequence = prompt (P) | clean output (L) | noisy output (L). The clean stream is
token-causal over prompt and itself (the AR loss lives there, and it is exactly
what the KV cache holds at inference). A noisy position in block b sees the
prompt, the clean tokens before block b, and its own noisy block
bidirectionally: what a block being denoised sees at inference. Noisy positions
reuse their clean twins' position ids.
"""
from __future__ import annotations

import torch

from ddrive_ros.scaffold.layout import Layout


def dual_stream_mask(prompt_len: int, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns mask (T, T) bool (True = may attend) and positions (T,) for T = P + 2L."""
    p, length = prompt_len, layout.length
    t = p + 2 * length
    mask = torch.zeros(t, t, dtype=torch.bool)
    mask[: p + length, : p + length] = torch.tril(torch.ones(p + length, p + length, dtype=torch.bool))
    block = torch.as_tensor(layout.block)
    start = torch.tensor([b.start for b in layout.blocks])[block]  # (L,) start of each position's block
    j = torch.arange(length)
    # noisy rows: prompt always; clean output before the block start; same-block noisy positions
    mask[p + length:, :p] = True
    mask[p + length:, p:p + length] = j[None, :] < start[:, None]
    mask[p + length:, p + length:] = block[:, None] == block[None, :]
    positions = torch.cat([torch.arange(p + length), p + j])
    return mask, positions
