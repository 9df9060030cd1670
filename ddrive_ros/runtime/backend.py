"""The one small interface every runtime implements; decoders never know which one runs.

A backend owns the model weights and a static KV cache with `max_rows` rows.
Rows [0, n) are the live batch: 1 for the shared sections, N after a fork.

Optional class facts the decode loop reads: `dynamic_windows` (see `step`) and
`prior_run_positions`, how many positions one causal forward may span to verify
a previous-plan draft over several blocks at once (decoding/block_loop.py, "Prior
runs"): large where a longer forward is nearly free (a GPU), small on a CPU,
whose forward cost grows with the positions; 0 or absent: block by block.
"""
from __future__ import annotations

from typing import Protocol

# positions one prior-verification forward may span, by the device it runs on (see the module docstring)
PRIOR_RUN_POSITIONS = {"cuda": 512, "cpu": 0}

import torch


class Backend(Protocol):
    name: str
    prompt_len: int
    window: int
    vocab_size: int

    def prompt(self, images: torch.Tensor, ego: torch.Tensor, bos: torch.Tensor, nav: torch.Tensor) -> torch.Tensor:
        """uint8 images (1, 6, H, W, 3) at model size, ego features (1, F), token ids (1,) -> prompt embeddings."""

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        """Causal forward over the prompt into cache row 0; returns the last logit (1, V)."""

    def step(self, tokens: torch.Tensor, start: int, valid: int, bidirectional: bool, action: bool) -> torch.Tensor:
        """One block forward on rows [0, n) (n = tokens.shape[0]); tokens (n, window) at absolute
        positions start..start+window-1, of which `valid` are real; returns logits (n, window, V).
        A backend with `dynamic_windows = True` also takes windows that start inside a block (a
        shorter tokens tensor at a later start); one without it is only ever given whole blocks."""

    def fork(self, n: int, prefix_len: int) -> None:
        """Copy row 0's first prefix_len cache positions into rows 1..n-1."""
