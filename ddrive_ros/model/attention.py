"""Attention over the keys that exist, without a mask tensor over the whole cache.

A cached forward reads keys [0, S) of the static cache, where S is known on the
host from the block layout (prefix + window): the cache is preallocated at its
maximum length, but only its live prefix is attended. Two patterns cover every
forward the decoders make:

- bidirectional draft: queries see every key in [0, start + valid): no mask at all;
- token-causal (prefill, AR, verify, commit): the window's W queries sit at the last
  W key positions, so query i sees keys j <= i + (S - W): a lower-right causal
  pattern, square (plain `is_causal`) for the prefill.

Grouped-query attention reads the shared K/V heads directly (`enable_gqa`), so
the K/V heads are never copied per query head.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def lower_right_causal(queries: int, keys: int, device: torch.device) -> torch.Tensor | object:
    """The token-causal pattern for `queries` at the end of `keys`.

    On CUDA a CausalBias object: SDPA then runs a fused kernel with the offset, no mask. On the CPU
    torch would materialise that bias in every layer, so a (W, S) bool over the live keys is built
    once per forward instead and shared by the layers (S is the live length, not the cache length).
    """
    if queries == keys:
        return None  # square: plain is_causal
    if device.type == "cuda":
        # imported here: torch.nn.attention.bias pulls in torch._dynamo, seconds of import on a CPU-only run
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(queries, keys)
    offset = keys - queries
    return torch.arange(keys, device=device)[None, :] <= torch.arange(queries, device=device)[:, None] + offset


def attend_live(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                pattern: torch.Tensor | object | None) -> torch.Tensor:
    """q (B, H, W, D), k/v (B, H_kv, S, D) live keys; `pattern` from lower_right_causal when causal."""
    gqa = q.shape[1] != k.shape[1]
    if not causal:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    if pattern is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=pattern, enable_gqa=gqa)


def attend_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  heads: tuple[int, int, int] | None = None) -> torch.Tensor:
    """Explicit-mask attention for training, the uncached reference and traced (ONNX) graphs.

    GQA without copies by folding the query heads of each K/V group into the query length:
    (B, H, W, D) -> (B, H_kv, rep * W, D), with the (.., W, S) mask tiled over the group. Plain
    SDPA ops, so the legacy ONNX exporter (which has no enable_gqa) traces it.

    `heads`: (heads, kv_heads, head_dim) as the config's Python ints. A traced graph then computes no
    shapes from tensors for them (nor SDPA's scale from the head size): 404 -> 295 nodes per live step
    graph after ONNX Runtime's optimiser. The arithmetic is the same: SDPA's default scale is 1 / sqrt(D).
    """
    h, kv, d = heads if heads is not None else (q.shape[1], k.shape[1], q.shape[-1])
    rep = h // kv
    scale = 1.0 / math.sqrt(d)
    if rep == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    b = q.shape[0]
    grouped = q.reshape(b, kv, -1, d)
    if mask is None:  # every key visible (a draft over the live keys)
        pass
    elif mask.dim() == 4:  # (B|1, 1, W, S): the head axis is broadcast, the group axis tiles queries
        mask = mask.repeat(1, 1, rep, 1)
    else:
        mask = mask.repeat(rep, 1)
    return F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask, scale=scale).reshape(b, h, -1, d)
