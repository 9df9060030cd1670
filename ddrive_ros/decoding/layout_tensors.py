"""A layout's per-block masks as device tensors, built once per (layout, device).

The loop reads, per block, which window positions are editable and which tokens
each may take. Copying those from numpy to the device for every block of every
plan is a host-to-device transfer (and a sync on a GPU) per block; they depend on
the schema and block size only (and the decode-time logit bias, `logit_bias.py`, when one is asked for),
so they are built on first use and kept.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ddrive_ros.decoding.logit_bias import Entries
from ddrive_ros.decoding.sampling import allowed_bias
from ddrive_ros.scaffold.layout import Layout


@dataclass(frozen=True)
class BlockTensors:
    editable: torch.Tensor  # (W,) bool, False past the block's end
    allowed: torch.Tensor  # (W, V) bool, False past the block's end
    bias: torch.Tensor  # (W, V) float32: `allowed` as the additive bias the loop's softmax takes, plus any logit bias
    n_editable: int  # host copy: how many positions the block decides (per row)
    first_editable: bool  # host copy: whether the carried logit fills position 0


@dataclass(frozen=True)
class LayoutTensors:
    template: torch.Tensor  # (L,) template ids
    blocks: tuple[BlockTensors, ...]


_BUILT: "weakref.WeakKeyDictionary[Layout, dict[tuple, LayoutTensors]]" = weakref.WeakKeyDictionary()


def layout_tensors(layout: Layout, window: int, vocab_size: int, device: torch.device,
                   logit_bias: Entries = ()) -> LayoutTensors:
    """The masks of every block of `layout` on `device`, padded to `window` positions; `logit_bias`:
    (position, token id, offset) triples added to the softmax bias (`logit_bias.entries`)."""
    key = (str(device), window, vocab_size, logit_bias)
    per_layout = _BUILT.setdefault(layout, {})
    if key not in per_layout:
        per_layout[key] = _build(layout, window, vocab_size, device, logit_bias)
    return per_layout[key]


def _build(layout: Layout, window: int, vocab_size: int, device: torch.device, logit_bias: Entries) -> LayoutTensors:
    if layout.allowed.shape[1] != vocab_size:
        raise ValueError(f"layout allows {layout.allowed.shape[1]} token ids, the model has {vocab_size}")
    blocks = []
    for block in layout.blocks:
        if block.length > window:
            raise ValueError(f"block {block.index} has {block.length} positions, the window {window}")
        editable = torch.zeros(window, dtype=torch.bool)
        editable[: block.length] = torch.as_tensor(layout.editable[block.start:block.end])
        allowed = torch.zeros(window, vocab_size, dtype=torch.bool)
        allowed[: block.length] = torch.as_tensor(layout.allowed[block.start:block.end])
        bias = allowed_bias(allowed)
        for pos, tok, offset in logit_bias:
            if block.start <= pos < block.end:
                if not bool(allowed[pos - block.start, tok]):
                    raise ValueError(f"logit bias: token {tok} is not allowed at position {pos}")
                bias[pos - block.start, tok] += offset
        blocks.append(BlockTensors(editable.to(device), allowed.to(device), bias.to(device),
                                   int(editable.sum()), bool(layout.editable[block.start])))
    return LayoutTensors(torch.as_tensor(layout.template_ids).to(device), tuple(blocks))
