"""Small building blocks: RMSNorm, rotary positions, SwiGLU."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():  # the legacy exporter has no rms_norm: the same math in plain ops
            dtype = x.dtype
            x = x.float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return (x * self.weight.float()).to(dtype)
        # one fused op instead of seven (a forward runs nine norms; on a CPU each op costs microseconds);
        # torch computes it in float32 for lower-precision inputs, as the plain form does
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rope_table(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin tables (length, head_dim), indexed by position tensors (static shapes):
    cos is [cos, cos] and sin is [-sin, sin] over the two halves, so that rotate-half is one roll."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    return torch.cat([cos, cos], -1), torch.cat([-sin, sin], -1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D); cos/sin (T, D) from rope_table, already gathered at the positions. Rotate-half
    form: (x1 c - x2 s, x2 c + x1 s) = x * [c, c] + roll(x, D/2) * [-s, s], the same products and sums
    (bit for bit) in four ops instead of eleven."""
    if x.dtype != torch.float32:  # rotate in float32 (bf16 on a GPU); no conversion ops in float32
        return apply_rope(x.float(), cos, sin).to(x.dtype)
    return x * cos + torch.roll(x, x.shape[-1] // 2, -1) * sin
