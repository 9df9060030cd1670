"""Decoder-only transformer backbone: RMSNorm, rotary positions, SwiGLU, grouped-query attention.

Two ways in, one set of layers:
- `forward_cached`: a fixed-length window at positions start..start+W-1, writing
  its K/V into the static cache in place and attending only to the live keys
  [0, S): token-causal (prefill, AR, verify, commit; S = start + W) or
  bidirectional inside the block on top of the prefix (draft; S = start + valid).
  start, S and the mode are host integers from the block layout: shapes and
  offsets say who sees whom, no mask tensor over the cache (see attention.py).
- `forward_masked`: the whole sequence with an explicit boolean mask, no cache:
  training and the uncached reference the tests compare against.
Trajectory (action) positions use the Action Expert FFN instead of the shared
FFN, and the action head. `action` is a Python bool for a window that lies in
one section (blocks never cross sections): only the FFN and head that the step
needs run. Training passes a per-position bool tensor.
"""
from __future__ import annotations

import torch
from torch import nn

from ddrive_ros.model.attention import attend_live, attend_masked, lower_right_causal
from ddrive_ros.model.config import BackboneConfig
from ddrive_ros.model.kv_cache import KVCacheView
from ddrive_ros.model.layers import RMSNorm, SwiGLU, apply_rope, rope_table

Action = bool | torch.Tensor


class Attention(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q = nn.Linear(cfg.dim, cfg.heads * cfg.head_dim, bias=False)
        self.kv = nn.Linear(cfg.dim, 2 * cfg.kv_heads * cfg.head_dim, bias=False)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, cfg.dim, bias=False)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        # shapes from the config's ints, not the tensors': a traced graph then computes none of them
        q = self.q(x).unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)
        k, v = self.kv(x).unflatten(-1, (2, self.kv_heads, self.head_dim)).permute(2, 0, 3, 1, 4)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    @property
    def shape(self) -> tuple[int, int, int]:
        """(heads, kv_heads, head_dim) for `attend_masked`."""
        return self.heads, self.kv_heads, self.head_dim

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Explicit-mask attention (training, reference, traced graphs)."""
        return self.out(attend_masked(q, k, v, mask, self.shape))

    def out(self, attn: torch.Tensor) -> torch.Tensor:
        return self.o(attn.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim)
        self.ffn = SwiGLU(cfg.dim, cfg.ffn_hidden)
        self.action_ffn = SwiGLU(cfg.dim, cfg.action_ffn_hidden)

    def feed_forward(self, x: torch.Tensor, action: Action) -> torch.Tensor:
        h = self.ffn_norm(x)
        if isinstance(action, bool):
            return x + (self.action_ffn(h) if action else self.ffn(h))
        return x + torch.where(action[..., None], self.action_ffn(h), self.ffn(h))


class Backbone(nn.Module):
    def __init__(self, cfg: BackboneConfig, vocab_size: int, max_len: int, action_rope_shift: int = 0):
        super().__init__()
        self.cfg = cfg
        self.action_rope_shift = int(action_rope_shift)  # ModelConfig.action_rope_shift
        self.embed = nn.Embedding(vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, vocab_size, bias=False)
        self.action_head = nn.Linear(cfg.dim, vocab_size, bias=False)
        cos, sin = rope_table(cfg.head_dim, max_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def rope_positions(self, positions: torch.Tensor, action: Action | torch.Tensor) -> torch.Tensor:
        """Rotary positions of cache positions: trajectory (action) ones sit `action_rope_shift` earlier."""
        if not self.action_rope_shift:
            return positions
        if isinstance(action, bool):
            return positions - self.action_rope_shift if action else positions
        return positions - self.action_rope_shift * action.to(positions.dtype)

    def rope_at(self, positions: torch.Tensor, action: Action) -> tuple[torch.Tensor, torch.Tensor]:
        rp = self.rope_positions(positions, action)
        return self.rope_cos[rp], self.rope_sin[rp]

    def rope_window(self, start: int, w: int, action: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of a window at cache positions start..start+w-1 (host integers: a slice, no gather)."""
        r = start - self.action_rope_shift if action else start
        if r < 0:
            raise ValueError(f"an action window at {start} with action_rope_shift {self.action_rope_shift} "
                             "would have negative rotary positions")
        return self.rope_cos[r:r + w], self.rope_sin[r:r + w]

    def logits(self, h: torch.Tensor, action: Action) -> torch.Tensor:
        h = self.norm(h)
        if isinstance(action, bool):
            return (self.action_head if action else self.head)(h).float()
        return torch.where(action[..., None], self.action_head(h), self.head(h)).float()

    def forward_cached(self, x: torch.Tensor, start: int, live: int, causal: bool, cache: KVCacheView,
                       action: bool, last_only: bool = False) -> torch.Tensor:
        """x (B, W, D) embeddings at positions start..start+W-1; writes their K/V into the cache in place;
        queries attend to the live keys [0, live) (causal: token-causal, live = start + W; else every live
        key). Returns logits (B, W, V), or (B, 1, V) for the last position with `last_only`."""
        w = x.shape[1]
        end = start + w
        if causal and live != end:
            raise ValueError(f"a causal window at {start}..{end} attends to keys [0, {end}), got {live}")
        if live > end or live <= start:
            raise ValueError(f"live keys [0, {live}) must end inside the window {start}..{end}")
        cos, sin = self.rope_window(start, w, action)
        pattern = lower_right_causal(w, live, x.device) if causal else None
        for i, layer in enumerate(self.layers):
            q, k, v = layer.attn.project(layer.attn_norm(x), cos, sin)
            # the cache keeps its own dtype (bf16 on a GPU); the window is written where it lives
            cache.k[i][:, :, start:end] = k
            cache.v[i][:, :, start:end] = v
            keys, values = cache.k[i][:, :, :live], cache.v[i][:, :, :live]
            if keys.dtype != q.dtype:
                keys, values = keys.to(q.dtype), values.to(q.dtype)
            x = x + layer.attn.out(attend_live(q, keys, values, causal, pattern))
            x = layer.feed_forward(x, action)
        return self.logits(x[:, -1:] if last_only else x, action)

    def forward_masked(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                       action: Action) -> torch.Tensor:
        """x (B, T, D); mask (B or 1, T, T) bool, True = may attend; returns logits (B, T, V)."""
        cos, sin = self.rope_at(positions, action)
        mask = mask[:, None]
        for layer in self.layers:
            q, k, v = layer.attn.project(layer.attn_norm(x), cos, sin)
            x = x + layer.attn.attend(q, k, v, mask)
            x = layer.feed_forward(x, action)
        return self.logits(x, action)
