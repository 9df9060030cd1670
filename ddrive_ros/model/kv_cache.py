"""Static KV cache: preallocated once, written in place, forkable along the batch.

Shapes never change from plan to plan (what CUDA graphs and TensorRT need):
k, v are (layers, batch, kv_heads, max_len, head_dim). Decoding at batch n uses
the first n rows; forking copies row 0's prefix into rows 1..n-1 without any
forward.
"""
from __future__ import annotations

import torch


class KVCache:
    def __init__(self, layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        shape = (layers, batch, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.batch = batch
        self.max_len = max_len
        self._views: dict[int, KVCacheView] = {}

    def rows(self, n: int) -> "KVCacheView":
        if n > self.batch:
            raise ValueError(f"cache holds {self.batch} rows, {n} requested (raise max rollouts)")
        if n not in self._views:  # made once per row count: a decode step pays no view ops for it
            self._views[n] = KVCacheView(self.k[:, :n], self.v[:, :n])
        return self._views[n]

    def fork(self, n: int, prefix_len: int) -> None:
        """Copy row 0's first `prefix_len` positions into rows 1..n-1 (no recompute)."""
        if n > self.batch:
            raise ValueError(f"cannot fork into {n} rows: cache has {self.batch}")
        self.k[:, 1:n, :, :prefix_len].copy_(self.k[:, :1, :, :prefix_len].expand(-1, n - 1, -1, -1, -1))
        self.v[:, 1:n, :, :prefix_len].copy_(self.v[:, :1, :, :prefix_len].expand(-1, n - 1, -1, -1, -1))

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class KVCacheView:
    """The first n rows of a cache as one view per layer (k[i], v[i]: (n, kv_heads, max_len, head_dim)),
    so writes land in the cache itself."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor):
        self.k = list(k.unbind(0))
        self.v = list(v.unbind(0))
