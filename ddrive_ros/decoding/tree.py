"""Tree verification for scaffold speculative decoding: several candidate rows checked by one forward.

Why: in a trajectory of ordinal bin tokens, once the verifier corrects a coordinate by d bins, its own
prediction for that coordinate's next waypoint (the redraft, made from the wrong prefix) is off by
about d again, give or take a few bins (docs/training.md, "why speculative decoding stops near 2x"),
so a plain verification confirms about one waypoint per forward.

What: after a verification that corrected ordinal position c by d ranks, the next verification runs
K rows in one causal forward. Row 0 is the plain redraft. Row r moves the first open position q of
c's coordinate (the next waypoint's x after an x) and every later draft of that coordinate by
d + offset_r ranks, offsets 0, -1, +1, -2, +2, ... All rows agree before q, so the verifier's
choice at q is the same in each; the row whose token at q is that choice goes on to confirm the
positions after it. The decoder keeps the row with the longest agreeing prefix.

Exactness: every row's accepted tokens are the AR argmax given that row's own prefix, and the kept
row's prefix is itself accepted, so its tokens are AR's greedy choices: greedy output equals AR
whichever rows are offered (tested against AR plan by plan). Only row 0's cache rows are kept: the
decode loop's committed-prefix bookkeeping (block_loop.py) sees where the kept row differs from row 0
and the next forward recomputes from there, so no cache row is copied back.

Cost: one forward over K rows, and a fork of the prefix into rows 1..K-1 before it. On a GPU a batch
of K rows of a small window costs about what one row does; on a CPU the cost grows about linearly
with the rows (bench/tree_verification.py measures both sides). Greedy, one row (no rollouts), action
blocks only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from ddrive_ros.scaffold.layout import Layout

ORDINAL_GROUP = "bin"


@dataclass
class Ordinal:
    """The layout's ordinal positions: coordinate id per position (-1: not ordinal), and rank <-> id."""

    coord: np.ndarray  # (L,) int
    rank_of: torch.Tensor  # (V,) long, -1 for tokens that are not bins
    ids: torch.Tensor  # (R,) long, the token at each rank

    @property
    def ranks(self) -> int:
        return int(self.ids.shape[0])


def ordinal(layout: Layout, device: torch.device) -> Ordinal | None:
    """The layout's ordinal tables (None if it has no bin positions), made once per layout and device and
    kept on the layout itself (a module-level cache keyed by id() would hand a new layout a dead one's)."""
    tables = layout.__dict__.setdefault("_ordinal_tables", {})
    key = str(device)
    if key not in tables:
        tables[key] = _build(layout, device)
    return tables[key]


def _build(layout: Layout, device: torch.device) -> Ordinal | None:
    coord = np.full(layout.length, -1, dtype=np.int64)
    names: list[str] = []
    order: tuple[str, ...] | None = None
    for i, slot in enumerate(layout.slots):
        if slot is None or slot.group != ORDINAL_GROUP:
            continue
        name = re.sub(r"\.\d+\.", ".", slot.field)  # trajectory.waypoints.3.x -> trajectory.waypoints.x
        if name not in names:
            names.append(name)
        coord[i] = names.index(name)
        order = order or slot.allowed
    if order is None:
        return None
    ids = torch.tensor([layout.tokenizer.id(t) for t in order], dtype=torch.long)
    rank_of = torch.full((len(layout.tokenizer),), -1, dtype=torch.long)
    rank_of[ids] = torch.arange(len(ids))
    return Ordinal(coord, rank_of.to(device), ids.to(device))


def offsets(k: int) -> list[int]:
    """0, -1, +1, -2, +2, ... (k of them): the verifier's error after a shift of d is d-centred,
    a little more often short than long (docs/training.md)."""
    out = [0]
    i = 1
    while len(out) < k:
        out.append(-i)
        if len(out) < k:
            out.append(i)
        i += 1
    return out


def hint(table: Ordinal, block_start: int, x: torch.Tensor, ar_tokens: torch.Tensor, rejected_at: torch.Tensor,
         w: int) -> tuple[int, int] | None:
    """(window position c, d ranks) of this verification's correction when it is at an ordinal position,
    else None. One host read (two small ints)."""
    c = int(rejected_at[0])
    if c >= w or table.coord[block_start + c] < 0:
        return None
    d = int(table.rank_of[ar_tokens[0, c]] - table.rank_of[x[0, c]])
    return c, d


def prior_hint(table: Ordinal, block_start: int, open_: torch.Tensor) -> tuple[int, int, bool] | None:
    """For a block's first verification of a draft from outside the model (the previous plan, the ego
    state): branch at the first open ordinal position itself with no correction to follow (d = 0)."""
    w = open_.shape[1]
    where = np.flatnonzero(open_[0].cpu().numpy() & (table.coord[block_start:block_start + w] >= 0))
    return (int(where[0]), 0, True) if len(where) else None


def rows(table: Ordinal, block_start: int, x: torch.Tensor, open_: torch.Tensor, at: tuple, k: int, depth: int = 1
         ) -> torch.Tensor | None:
    """(K, W) candidate rows for a (1, W) drafted window whose open positions hold the redraft, after a
    correction `at` = (c, d) (or (c, d, True): branch at c itself); row 0 is `x` itself. None when no
    open position of c's coordinate follows c. depth 2: the coordinate's first two moved positions
    branch independently (floor(sqrt(K)) offsets each, the second on top of the first's shift), so a
    row can confirm a third waypoint; depth 1 spends every row on the first."""
    c, d = at[:2]
    w = x.shape[1]
    coord = torch.as_tensor(table.coord[block_start:block_start + w] == table.coord[block_start + c], device=x.device)
    pos = torch.arange(w, device=x.device)
    later = pos >= c if len(at) > 2 and at[2] else pos > c
    moved = open_[0] & coord & later
    if not bool(moved.any()):
        return None
    ranks = table.rank_of[x[0]]
    if depth == 2:
        side = max(int(k ** 0.5), 1)
        after_first = torch.cumsum(moved.long(), 0) >= 2  # the coordinate's moved positions after the first
        pairs = [(d + o1, o2) for o1 in offsets(side) for o2 in offsets(side) if (d + o1, o2) != (0, 0)][: k - 1]
        out = x.repeat(len(pairs) + 1, 1)
        for r, (s1, s2) in enumerate(pairs, start=1):
            shifted = (ranks + torch.where(after_first, s1 + s2, s1)).clamp(0, table.ranks - 1)
            out[r] = torch.where(moved, table.ids[shifted], x[0])
        return out
    shifts = [d + o for o in offsets(k + 1) if d + o != 0][: k - 1]
    out = x.repeat(len(shifts) + 1, 1)
    for r, s in enumerate(shifts, start=1):
        shifted = (ranks + s).clamp(0, table.ranks - 1)
        out[r] = torch.where(moved, table.ids[shifted], x[0])
    return out
