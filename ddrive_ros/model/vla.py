"""The driving VLA: vision encoder + ego encoder + block-causal backbone.

Prompt = <bos> | 6 x image tokens | ego tokens | <nav:...>, then the plan template.
Logits are shifted in both modes: the logit at position j predicts token j+1,
so one head serves AR (causal) and diffusion (bidirectional block) decoding and
AR verification of a drafted block is a plain causal forward over it.
"""
from __future__ import annotations

import torch
from torch import nn

from ddrive_ros.model.backbone import Backbone
from ddrive_ros.model.config import ModelConfig
from ddrive_ros.model.kv_cache import KVCache, KVCacheView
from ddrive_ros.model.vision import EgoEncoder, VisionEncoder, ego_features
from ddrive_ros.observation import PAST_STEPS


class DrivingVLA(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size <= 0 or cfg.output_len <= 0:
            raise ValueError("ModelConfig needs vocab_size and output_len (use cfg.with_output(...))")
        self.cfg = cfg
        bb = cfg.backbone
        self.vision = VisionEncoder(cfg.vision, bb.dim)
        self.ego = EgoEncoder(3 + 2 * PAST_STEPS, bb.dim, cfg.ego_tokens)
        self.backbone = Backbone(bb, cfg.vocab_size, cfg.rope_len, cfg.action_rope_shift)

    # ------------------------------------------------------------------ prompt
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 6, 3, H, W) float in [-1, 1] -> visual tokens (B, image_tokens, D)."""
        return self.vision(images)

    def prompt_embeds(self, visual: torch.Tensor, ego: torch.Tensor, bos: torch.Tensor, nav: torch.Tensor) -> torch.Tensor:
        """visual (B, N, D), ego features (B, F), bos/nav token ids (B,) -> prompt embeddings (B, P, D)."""
        emb = self.backbone.embed
        return torch.cat([emb(bos)[:, None], visual.to(emb.weight.dtype), self.ego(ego.to(emb.weight.dtype)), emb(nav)[:, None]], 1)

    def ego_features(self, speed, accel, yaw_rate, past_xy) -> torch.Tensor:
        """The ego-state features this model reads (its config's `ego_accel` says whether acceleration is one)."""
        return ego_features(speed, accel, yaw_rate, past_xy, self.cfg.ego_accel)

    # ------------------------------------------------------------------ cached steps
    def new_cache(self, batch: int, window: int, device=None, dtype=None) -> KVCache:
        """A cache for `batch` rows and blocks of up to `window` positions."""
        if window > self.cfg.output_len:
            raise ValueError(f"window {window} exceeds the output length {self.cfg.output_len}")
        bb = self.cfg.backbone
        p = self.backbone.embed.weight
        return KVCache(bb.layers, batch, bb.kv_heads, self.cfg.cache_len(window), bb.head_dim,
                       dtype=dtype or p.dtype, device=device or p.device)

    def prefill(self, prompt: torch.Tensor, cache: KVCacheView) -> torch.Tensor:
        """Causal forward over the prompt; writes K/V [0, P); returns the last logit (B, V)."""
        p = prompt.shape[1]
        # logits are per position: only the last one needs the head
        return self.backbone.forward_cached(prompt, 0, p, True, cache, False, last_only=True)[:, -1]

    def step(self, tokens: torch.Tensor, start: int, valid: int, bidirectional: bool, cache: KVCacheView,
             action: bool) -> torch.Tensor:
        """One block forward: tokens (B, W) at absolute positions start..start+W-1, of which the first
        `valid` are the block. Writes the window's K/V in place; returns logits (B, W, V).
        Draft (bidirectional): the block sees the prefix and itself up to `valid`. Otherwise token-causal."""
        w = tokens.shape[1]
        live = start + valid if bidirectional else start + w
        return self.backbone.forward_cached(self.backbone.embed(tokens), int(start), int(live), not bidirectional,
                                            cache, bool(action))

    # ------------------------------------------------------------------ uncached reference / training
    def forward_full(self, prompt: torch.Tensor, out_tokens: torch.Tensor, mask: torch.Tensor, action: torch.Tensor,
                     positions: torch.Tensor | None = None) -> torch.Tensor:
        """prompt (B, P, D), out_tokens (B, Lo) -> logits (B, P + Lo, V) under an explicit mask (B|1, T, T).
        `positions` (T,) defaults to 0..T-1; training passes repeated positions for the noisy stream."""
        x = torch.cat([prompt, self.backbone.embed(out_tokens)], 1)
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device)
        return self.backbone.forward_masked(x, positions, mask, action)

    # ------------------------------------------------------------------ sizes
    def param_counts(self) -> dict[str, int]:
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        action = sum(count(layer.action_ffn) for layer in self.backbone.layers) + count(self.backbone.action_head)
        vision = count(self.vision)
        backbone = count(self.backbone) + count(self.ego)
        return {"vision_params": vision, "backbone_params": backbone, "action_expert_params": action,
                "total_params": vision + backbone}
