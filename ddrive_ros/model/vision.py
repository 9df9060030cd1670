"""ViT over each camera image, 2x2 patch merging, projection into the backbone width."""
from __future__ import annotations

import torch
from torch import nn

from ddrive_ros.model.config import N_FRAMES, VisionConfig
from ddrive_ros.observation import CAMERAS


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionEncoder(nn.Module):
    """images (B, 6, 3, H, W) float in [-1, 1] (frames x cameras flattened) -> (B, 6 * tokens_per_image, out_dim)."""

    def __init__(self, cfg: VisionConfig, out_dim: int):
        super().__init__()
        self.cfg = cfg
        gh, gw = cfg.grid
        self.patch = nn.Conv2d(3, cfg.dim, kernel_size=cfg.patch, stride=cfg.patch)
        self.pos = nn.Parameter(torch.randn(1, gh * gw, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(cfg.dim, cfg.heads, cfg.mlp) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        m = cfg.merge
        self.merger = nn.Sequential(nn.Linear(cfg.dim * m * m, out_dim), nn.GELU(), nn.Linear(out_dim, out_dim))
        # which camera and which frame a token came from
        self.view_embed = nn.Parameter(torch.randn(N_FRAMES * len(CAMERAS), 1, out_dim) * 0.02)

    def view_tokens(self, views: torch.Tensor) -> torch.Tensor:
        """images (M, 3, H, W) float in [-1, 1], any cameras and frames -> (M, tokens_per_image, out_dim),
        before the camera/frame embedding: a function of each image alone, so a frame seen again (the
        current frame of one plan is the history frame of a later one) can reuse its tokens."""
        x = self.patch(views)  # (M, C, gh, gw)
        m_, c, gh, gw = x.shape
        x = x.flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        m = self.cfg.merge
        x = x.view(m_, gh // m, m, gw // m, m, c).permute(0, 1, 3, 2, 4, 5).reshape(m_, (gh // m) * (gw // m), m * m * c)
        return self.merger(x)

    def place(self, view_tokens: torch.Tensor) -> torch.Tensor:
        """(B, 6, tokens_per_image, out_dim) per-image tokens in frame x camera order -> the visual
        tokens (B, 6 * tokens_per_image, out_dim), each marked with its camera and frame."""
        return (view_tokens + self.view_embed).flatten(1, 2)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, n = images.shape[:2]
        x = self.view_tokens(images.flatten(0, 1))
        return self.place(x.view(b, n, -1, x.shape[-1]))


def ego_features(speed: torch.Tensor, accel: torch.Tensor, yaw_rate: torch.Tensor, past_xy: torch.Tensor,
                 use_accel: bool = True) -> torch.Tensor:
    """Continuous ego state, scaled to order one: (B,), (B,), (B,), (B, P, 2) -> (B, 3 + 2P).
    `use_accel` False holds the acceleration feature at 0 (a model configured not to read it)."""
    a = accel / 3.0 if use_accel else torch.zeros_like(accel)
    return torch.cat([(speed / 10.0)[:, None], a[:, None], yaw_rate[:, None], past_xy.flatten(1) / 10.0], dim=1)


class EgoEncoder(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, n_tokens: int):
        super().__init__()
        self.n_tokens = n_tokens
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.GELU(), nn.Linear(out_dim, out_dim * n_tokens))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.mlp(feats).view(feats.shape[0], self.n_tokens, -1)
