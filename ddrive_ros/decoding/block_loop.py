"""The one decode loop every decoder shares.

For each section-aligned block: lay the template into a fixed window; fill the
window's first position from the carried logit when it is editable (the previous
block's last causal logit predicts it exactly, for free); let the strategy
iterate until no editable position is open; then commit the block with one
causal forward unless the last forward already was a causal pass over exactly
the final tokens (a fully accepted verification), or the block is the plan's
last and no reflection reads the cache after it. The commit's last logit is
the next block's carry. At the trajectory section the cache may fork into N
rows that continue as one batch (multi-rollout).

Everything is decided on the device: constrained softmax, argmax or sampling,
acceptance, which positions close. The host reads one small tensor per
iteration (`BlockContext.status`: open positions left, and whether the last
causal forward saw the final tokens) and nothing else; block geometry comes
from the layout, already on the host. The sampling generator lives on the
device of the logits it samples.

Committed prefix: on backends with dynamic shapes (torch, ONNX Runtime), a
forward starts at the block's exact prefix instead of its first position. The
positions before the first open or changed one hold final tokens whose causal
K/V the last causal forward already wrote; the next forwards (draft and verify
alike) start one position before it (that position's output predicts the first
open one) and leave the cache before it alone. The same status read carries
that offset, so it costs no extra sync. Causal results are the same as over
the whole block (verification stays exact); a draft then reads the committed
positions' causal K/V, as it reads earlier blocks'. Static-shape backends (CUDA
graphs, TensorRT) always run whole blocks.

Prior draft: `decode(..., prior=ids)` hands the loop token ids from outside the model (the
previous plan carried forward to this observation: `ddrive_ros/previous_plan.py`) for every
editable position; a strategy that drafts (scaffold speculative) verifies them as the first draft
of each block instead of running its own draft forward. The verifier still decides every token, so
greedy output is AR's whatever the prior says; a block whose prior is accepted whole costs one
forward, the verification that is also its commit.

Prior runs: causal verification needs no block structure (it is AR's own forward), so on
dynamic-shape backends a run of consecutive blocks that all have a prior and share one kind of
step (text sections run the shared FFN, the trajectory the action expert) is verified by one
causal forward over the whole run (`_verify_prior_run`). The longest agreeing prefix is final, as
in a block's verification; the blocks it covers are done with their causal K/V written, and the
block where it stops continues from there (its final positions pinned, the prior as its first
draft). How many positions a run may span is the backend's `prior_run_positions`: long on a GPU,
where a forward over a few hundred positions costs about what a block's does; 0 on a CPU, where
the cost grows with the positions and block-by-block verification was measured as fast.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ddrive_ros.decoding.layout_tensors import BlockTensors, LayoutTensors, layout_tensors
from ddrive_ros.decoding.logit_bias import Entries
from ddrive_ros.decoding.sampling import choose, constrained_probs, first_true, greedy_choice, verify, verify_greedy
from ddrive_ros.plan import DecodeStats
from ddrive_ros.planner_options import PlannerOptions
from ddrive_ros.runtime.backend import Backend
from ddrive_ros.scaffold.layout import Block, Layout


@dataclass
class DecodeOptions:
    temperature: float = 0.0  # 0 = greedy for the shared sections
    rollouts: int = 1  # trajectory rollouts forked from the shared prefix
    rollout_temperature: float = PlannerOptions.rollout_temperature  # the one default
    seed: int = 0
    # (position, token id, offset) added to the log-odds there, for every decoder alike (decoding/logit_bias.py)
    logit_bias: Entries = ()


class BlockContext:
    """State of the block being decoded, over a fixed window (n rows x W positions)."""

    def __init__(self, backend: Backend, layout: Layout, block: Block, masks: BlockTensors, x: torch.Tensor,
                 carry: torch.Tensor, temperature: float, generator: torch.Generator, stats: DecodeStats):
        self.backend = backend
        self.mask_id = layout.tokenizer.mask_id
        self.block = block
        self.section = layout.schema.sections[block.section].name
        self.n, self.w = x.shape
        self.valid = block.length
        self.start = backend.prompt_len + block.start
        self.action = bool(layout.action[block.start])
        self.allowed = masks.allowed[: self.w]  # bool, for confidence estimates (S2D2)
        self.bias = masks.bias[: self.w]  # the same as the softmax's additive bias
        self.x = x
        self.open = masks.editable[None, : self.w].expand(self.n, -1).clone()
        self.carry = carry
        self.temperature = temperature
        self.greedy = temperature <= 0
        self.generator = generator
        self.stats = stats
        self._causal_x: torch.Tensor | None = None
        self._causal_last: torch.Tensor | None = None
        self.trim = bool(getattr(backend, "dynamic_windows", False))
        self.lo = 0  # window position the next forwards start at (see "Committed prefix" above)
        self.prior: torch.Tensor | None = None  # (n, W) ids from outside the model for the open positions
        self.layout = layout
        self.tree_hint: tuple | None = None  # the last correction, for tree verification (tree.py)

    def prior_draft(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The prior as a draft: its tokens and, when sampling, their proposal distribution (one-hot: a
        deterministic proposal, so acceptance min(1, q/p) is q and a rejection resamples from q without
        the drafted token, which keeps the AR distribution). None without a prior for this block."""
        if self.prior is None:
            return None
        probs = None if self.greedy else torch.nn.functional.one_hot(self.prior, self.bias.shape[-1]).float()
        return self.prior, probs

    # -- forwards -------------------------------------------------------------
    def forward(self, bidirectional: bool) -> torch.Tensor:
        """One backbone forward over the window; returns shifted prediction logits (n, W, V):
        entry j predicts window position j (entry 0 is the carried logit)."""
        return self._step(self.x, bidirectional)

    def forward_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """One causal forward over K candidate rows (K, W) of a one-row block (tree verification:
        decoding/tree.py): the prefix is forked into cache rows 1..K-1 first. Returns shifted prediction
        logits (K, W, V). The cache's row 0 holds rows[0]'s K/V, which is what the committed-prefix
        bookkeeping compares the kept tokens against."""
        self.backend.fork(rows.shape[0], self.start + self.lo)
        self.stats.tree_forwards += 1
        self.stats.tree_rows += rows.shape[0]
        return self._step(rows, False)

    def _step(self, x: torch.Tensor, bidirectional: bool) -> torch.Tensor:
        lo, k = self.lo, x.shape[0]
        logits = self.backend.step(x[:, lo:], self.start + lo, self.valid - lo, bidirectional, self.action)
        self.stats.forwards += 1
        self.stats.tokens_processed += k * (self.valid - lo)
        self.stats.forwards_per_section[self.section] = self.stats.forwards_per_section.get(self.section, 0) + 1
        if bidirectional:
            self._causal_x = None
        else:  # the cache's first self.n rows hold these tokens' causal K/V
            self._causal_x = x[: self.n].clone()
            self._causal_last = logits[: self.n, self.valid - 1 - lo]
        if lo == 0:
            return torch.cat([self.carry[:, None].expand(k, -1, -1), logits[:, :-1]], dim=1)
        # entry lo + 1 + i is predicted by window position lo + i; entries up to lo are closed positions
        return torch.cat([logits.new_zeros(k, lo + 1, logits.shape[-1]), logits[:, :-1]], dim=1)

    def probs(self, pred_logits: torch.Tensor) -> torch.Tensor:
        return constrained_probs(pred_logits, self.bias, self.temperature)

    def pick(self, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return choose(probs, self.greedy, self.generator)

    def choose_tokens(self, pred_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tokens for every window position and, when sampling, the distribution they were drawn from.
        Greedy needs no softmax (`greedy_choice`); decoders that read confidences use probs/pick."""
        if self.greedy:
            return greedy_choice(pred_logits, self.bias), None
        probs = self.probs(pred_logits)
        return choose(probs, False, self.generator)[0], probs

    def decide(self, where: torch.Tensor, tokens: torch.Tensor) -> None:
        """Write `tokens` at open positions `where` and close them."""
        where = where & self.open
        self.x = torch.where(where, tokens, self.x)
        self.open = self.open & ~where

    def fill_first(self) -> None:
        """Position 0 from the carried causal logit: exact, and no forward of its own."""
        if self.greedy:
            tok = greedy_choice(self.carry[:, None], self.bias[:1])
        else:
            tok, _ = choose(constrained_probs(self.carry[:, None], self.bias[:1], self.temperature), False, self.generator)
        tokens = self.x.clone()
        tokens[:, 0] = tok[:, 0]
        first = torch.zeros_like(self.open)
        first[:, 0] = True
        self.decide(first, tokens)

    def status(self) -> tuple[int, bool]:
        """The iteration's one host sync: (open positions left over all rows, whether the cache's
        causal K/V are stale, i.e. the tokens changed since the last causal forward or there was none)."""
        if self._causal_x is None:
            self.lo = 0
            return int(self.open.sum()), True
        changed = self._causal_x != self.x
        if not self.trim:
            left, stale = torch.stack([self.open.sum(), changed.any().long()]).tolist()
            return left, bool(stale)
        exact = first_true((changed | self.open).any(0))  # window positions before it: final, causal K/V cached
        left, stale, exact = torch.stack([self.open.sum(), changed.any().long(), exact]).tolist()
        self.lo = max(min(exact, self.valid) - 1, 0)
        return left, bool(stale)

    def finish(self, stale: bool) -> torch.Tensor:
        """Commit the block unless the cache already holds its exact causal K/V; return the next carry."""
        if stale or self._causal_x is None:
            self.forward(bidirectional=False)
        return self._causal_last


class Strategy(Protocol):
    name: str

    def begin_block(self, ctx: BlockContext) -> None: ...

    def step(self, ctx: BlockContext) -> None:
        """One iteration: must decide at least one open position in every row that has one."""


@dataclass
class TrajectoryStart:
    """What redoing the trajectory section on the cached prefix needs (reflection): the logit that
    predicts its first position, its blocks, the layout's tensors and the sampling state there."""

    carry: torch.Tensor  # (rows, V)
    blocks: list[Block]
    masks: LayoutTensors
    temperature: float
    generator: torch.Generator


class Reflector(Protocol):
    def __call__(self, backend: Backend, layout: Layout, out: torch.Tensor, start: TrajectoryStart,
                 strategy: Strategy, stats: DecodeStats) -> torch.Tensor:
        """Revise the decoded trajectory tokens of `out` (rows, L); return the new ids."""


def decode(backend: Backend, layout: Layout, prompt: torch.Tensor, strategy: Strategy,
           options: DecodeOptions | None = None, reflect: Reflector | None = None,
           prior: torch.Tensor | None = None) -> tuple[torch.Tensor, DecodeStats]:
    """Decode one plan. Returns output token ids (rows, L) (rows = rollouts) and statistics.
    `reflect` then revises the trajectory (each rollout on its own fork), reusing the cache.
    `prior` (L,) ids: a draft for every editable position, from outside the model (see the module
    docstring); blocks where it has a mask or an id the position may not take get none."""
    opt = options or DecodeOptions()
    stats = DecodeStats(decoder=strategy.name)
    t0 = time.perf_counter()
    carry = backend.prefill(prompt)
    stats.stage_ms["prefill"] = (time.perf_counter() - t0) * 1000.0
    stats.forwards += 1
    stats.tokens_processed += prompt.shape[1]
    stats.forwards_per_section["prompt"] = 1
    device = carry.device
    # sampling happens where the logits are: a CPU generator cannot drive multinomial on CUDA tensors
    gen = torch.Generator(device=device).manual_seed(opt.seed)
    masks = layout_tensors(layout, backend.window, backend.vocab_size, device, opt.logit_bias)
    out = masks.template[None].clone()
    priors = _prior_windows(layout, prior, device) if prior is not None else {}
    stats.prior_blocks = len(priors)
    # how many positions one verification forward may span: a backend's own measure of when a longer
    # forward stops being nearly free (GPU: a few hundred; CPU, where the cost grows with the positions: one block)
    run_positions = int(getattr(backend, "prior_run_positions", 0))
    runs = (bool(priors) and bool(getattr(backend, "dynamic_windows", False)) and getattr(strategy, "uses_prior", False)
            and run_positions > 0)
    done_through = -1  # blocks up to this index were finished by a prior run
    pinned: torch.Tensor | None = None  # final positions of the block a prior run stopped in
    names = layout.schema.section_names
    traj_blocks = layout.section_blocks(names.index("trajectory")) if "trajectory" in names else []
    fork_at = traj_blocks[0].index if traj_blocks else -1
    temperature = opt.temperature
    start: TrajectoryStart | None = None
    for block in layout.blocks:
        if block.index == fork_at:
            if opt.rollouts > 1:
                backend.fork(opt.rollouts, backend.prompt_len + block.start)
                out = out.expand(opt.rollouts, -1).clone()
                carry = carry.expand(opt.rollouts, -1).clone()
                temperature = opt.rollout_temperature
            start = TrajectoryStart(carry, traj_blocks, masks, temperature, gen)
        if block.index <= done_through:
            continue
        if runs and pinned is None and out.shape[0] == 1:
            run = _prior_run(layout, priors, block, run_positions)
            if len(run) > 1:  # one block: its own verification is the same forward
                done_through, carry, pinned = _verify_prior_run(backend, layout, masks, out, run, priors, carry,
                                                                temperature, gen, stats)
                if block.index <= done_through:
                    continue
        # the plan's last block closes without its commit forward when nothing reads the cache after it
        # (reflection revisits the trajectory on the cache; without it the next plan starts a new prefill)
        last = block.index == layout.blocks[-1].index and reflect is None
        carry = decode_block(backend, layout, masks, out, block, carry, strategy, temperature, gen, stats,
                             pinned=pinned, prior=priors.get(block.index), commit=not last)
        pinned = None
    t_blocks = time.perf_counter()
    stats.stage_ms["blocks"] = (t_blocks - t0) * 1000.0 - stats.stage_ms["prefill"]
    if reflect is not None and start is not None:
        out = reflect(backend, layout, out, start, strategy, stats)
        stats.stage_ms["reflect"] = (time.perf_counter() - t_blocks) * 1000.0
    stats.wall_ms = (time.perf_counter() - t0) * 1000.0
    return out, stats


def decode_block(backend: Backend, layout: Layout, masks: LayoutTensors, out: torch.Tensor, block: Block, carry: torch.Tensor,
                 strategy: Strategy, temperature: float, gen: torch.Generator, stats: DecodeStats,
                 pinned: torch.Tensor | None = None, prior: torch.Tensor | None = None,
                 commit: bool = True) -> torch.Tensor | None:
    """Decode one block of `out` (rows, L) in place from its template; return the next carry.
    `commit=False` (the plan's last block, nothing after it): no closing causal forward; returns None.
    `pinned` (rows, L) bool: editable positions kept as they are in `out` (inpainting around
    anchors); then the open count is read from the device once more per block.
    `prior` (block.length,) ids: the block's draft from outside the model (`decode`'s prior)."""
    bt = masks.blocks[block.index]
    # a dynamic-shape backend takes windows as long as the block itself: the loop's work per forward
    # (softmax, argmax, verification) then covers the block's positions, not the padded window
    w = block.length if getattr(backend, "dynamic_windows", False) else backend.window
    x = torch.full((out.shape[0], w), layout.tokenizer.pad_id, dtype=out.dtype, device=out.device)
    x[:, : block.length] = out[:, block.start:block.end]
    ctx = BlockContext(backend, layout, block, bt, x, carry, temperature, gen, stats)
    rows = out.shape[0]
    if prior is not None:  # (rows, W): the prior at editable positions, the template elsewhere
        ctx.prior = torch.where(bt.editable[None, :w], torch.nn.functional.pad(prior, (0, w - block.length))[None], x)
    if pinned is not None:
        keep = torch.zeros_like(ctx.open)
        keep[:, : block.length] = pinned[:, block.start:block.end]
        ctx.open &= ~keep
    if pinned is None:
        left = rows * bt.n_editable  # host bookkeeping from the layout: no sync
        if bt.first_editable:
            ctx.fill_first()
            left -= rows
            stats.tokens_decided += rows
    else:
        before = int(ctx.open.sum())
        if bt.first_editable:
            ctx.fill_first()
        left = int(ctx.open.sum())
        stats.tokens_decided += before - left
    strategy.begin_block(ctx)
    stale = True
    guard = bt.n_editable + 1
    while left > 0:
        strategy.step(ctx)
        now, stale = ctx.status()
        guard -= 1
        if now >= left or guard < 0:
            raise RuntimeError(f"{strategy.name} made no progress in block {block.index}")
        stats.tokens_decided += left - now
        left = now
    carry = ctx.finish(stale) if commit else None
    out[:, block.start:block.end] = ctx.x[:, : block.length]
    return carry


def _prior_run(layout: Layout, priors: dict[int, torch.Tensor], first: Block, max_positions: int) -> list[Block]:
    """The consecutive blocks from `first` that all have a prior, run the same kind of step (an
    action-expert block never shares a forward with a shared-FFN block) and span at most
    `max_positions` together."""
    action = bool(layout.action[first.start])
    run: list[Block] = []
    for block in layout.blocks[first.index:]:
        if block.index not in priors or bool(layout.action[block.start]) != action:
            break
        if run and block.end - first.start > max_positions:
            break
        run.append(block)
    return run


def _verify_prior_run(backend: Backend, layout: Layout, masks: LayoutTensors, out: torch.Tensor, run: list[Block],
                      priors: dict[int, torch.Tensor], carry: torch.Tensor, temperature: float, gen: torch.Generator,
                      stats: DecodeStats) -> tuple[int, torch.Tensor, torch.Tensor | None]:
    """One causal forward over the run with the prior in its editable positions; its longest agreeing
    prefix (plus the verifier's token at the first disagreement) is written into `out` (one row).
    Returns (index of the last block finished, the carry after it, and for the block the run stopped
    in the (1, L) mask of its final positions, or None when every block of the run is finished)."""
    a, b = run[0].start, run[-1].end
    template = out[:, a:b]
    editable = torch.cat([masks.blocks[blk.index].editable[: blk.length] for blk in run])
    bias = torch.cat([masks.blocks[blk.index].bias[: blk.length] for blk in run])
    draft = torch.where(editable[None], torch.cat([priors[blk.index] for blk in run])[None], template)
    logits = backend.step(draft, backend.prompt_len + a, b - a, False, bool(layout.action[a]))
    stats.forwards += 1
    stats.tokens_processed += b - a
    stats.forwards_per_section["prior run"] = stats.forwards_per_section.get("prior run", 0) + 1
    pred = torch.cat([carry[:, None], logits[:, :-1]], dim=1)  # entry j predicts run position j
    greedy = temperature <= 0
    if greedy:
        tokens, decided, rejected = verify_greedy(draft, greedy_choice(pred, bias), editable[None])
    else:
        probs = constrained_probs(pred, bias, temperature)
        one_hot = torch.nn.functional.one_hot(draft, bias.shape[-1]).float()
        tokens, decided, rejected = verify(draft, one_hot, probs, editable[None], False, gen)
    final = decided | ~editable[None]  # template positions are final as they stand
    upto = int(rejected[0])  # the run's one host read: where the agreeing prefix ends (b - a: nowhere)
    out[:, a:b] = torch.where(decided, tokens, template)
    stats.tokens_decided += int(layout.editable[a:a + min(upto + 1, b - a)].sum())  # host layout: no read
    if upto >= b - a:  # every position agreed: the whole run is final and its K/V are in the cache
        return run[-1].index, logits[:, -1], None
    # position `upto` holds the verifier's token, but the cache's K/V there were computed from the
    # prior's: the blocks before its block are finished, that block continues from its final positions
    stop = next(blk for blk in run if blk.start <= a + upto < blk.end)
    keep = torch.zeros_like(out, dtype=torch.bool)
    keep[:, a:b] = final & (torch.arange(b - a, device=out.device) <= upto)[None]
    keep[:, : stop.start] = False
    next_carry = carry if stop.start == a else logits[:, stop.start - a - 1]
    return stop.index - 1, next_carry, keep


def _prior_windows(layout: Layout, prior: torch.Tensor, device: torch.device) -> dict[int, torch.Tensor]:
    """Block index -> the prior's ids over that block, for the blocks whose every editable position
    has a prior id the position may take (checked once per plan on the host: the prior comes from
    the host, so this costs no device read)."""
    ids = prior.detach().cpu().reshape(-1)
    if ids.shape[0] != layout.length:
        raise ValueError(f"a prior draft has {ids.shape[0]} ids, the layout {layout.length}")
    ok = layout.allowed[np.arange(layout.length), ids.clamp(0, layout.allowed.shape[1] - 1).numpy()]
    ok &= ids.numpy() < layout.allowed.shape[1]
    out = {}
    for block in layout.blocks:
        sl = slice(block.start, block.end)
        if np.all(ok[sl] | ~layout.editable[sl]):
            out[block.index] = ids[sl].to(device)
    return out


def ranks_desc(score: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rank of each masked entry by descending score within its row (0 = best); unmasked rank large."""
    s = torch.where(mask, score, torch.full_like(score, -math.inf))
    order = s.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(s.shape[-1], device=s.device).expand_as(order))
    return torch.where(mask, ranks, torch.full_like(ranks, s.shape[-1]))
