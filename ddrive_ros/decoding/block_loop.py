"""The one decode loop every decoder shares.

For each section-aligned block: lay the template into a fixed window; fill the
window's first position from the carried logit when it is editable (the previous
block's last causal logit predicts it exactly, for free); let the strategy
iterate until no editable position is open; then commit the block with one
causal forward unless the last forward already was a causal pass over exactly
the final tokens (a fully accepted verification). The commit's last logit is
the next block's carry. At the trajectory section the cache may fork into N
rows that continue as one batch (multi-rollout).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ddrive_ros.decoding.sampling import choose, constrained_probs
from ddrive_ros.plan import DecodeStats
from ddrive_ros.runtime.backend import Backend
from ddrive_ros.scaffold.layout import Block, Layout


@dataclass
class DecodeOptions:
    temperature: float = 0.0  # 0 = greedy for the shared sections
    rollouts: int = 1  # trajectory rollouts forked from the shared prefix
    rollout_temperature: float = 0.7
    seed: int = 0


class BlockContext:
    """State of the block being decoded, over a fixed window (n rows x W positions)."""

    def __init__(self, backend: Backend, layout: Layout, block: Block, x: torch.Tensor, carry: torch.Tensor,
                 temperature: float, generator: torch.Generator, stats: DecodeStats):
        self.backend = backend
        self.mask_id = layout.tokenizer.mask_id
        self.block = block
        self.section = layout.schema.sections[block.section].name
        self.n, self.w = x.shape
        self.valid = block.length
        self.start = backend.prompt_len + block.start
        self.action = bool(layout.action[block.start])
        dev = x.device
        editable = torch.zeros(self.w, dtype=torch.bool, device=dev)
        editable[: self.valid] = torch.as_tensor(layout.editable[block.start:block.end], device=dev)
        self.allowed = torch.zeros(self.w, backend.vocab_size, dtype=torch.bool, device=dev)
        self.allowed[: self.valid] = torch.as_tensor(layout.allowed[block.start:block.end], device=dev)
        self.x = x
        self.open = editable[None].expand(self.n, -1).clone()
        self.carry = carry
        self.temperature = temperature
        self.greedy = temperature <= 0
        self.generator = generator
        self.stats = stats
        self._causal_x: torch.Tensor | None = None
        self._causal_last: torch.Tensor | None = None

    # -- forwards -------------------------------------------------------------
    def forward(self, bidirectional: bool) -> torch.Tensor:
        """One backbone forward over the window; returns shifted prediction logits (n, W, V):
        entry j predicts window position j (entry 0 is the carried logit)."""
        logits = self.backend.step(self.x, self.start, self.valid, bidirectional, self.action)
        self.stats.forwards += 1
        self.stats.tokens_processed += self.n * self.w
        self.stats.forwards_per_section[self.section] = self.stats.forwards_per_section.get(self.section, 0) + 1
        if bidirectional:
            self._causal_x = None
        else:
            self._causal_x = self.x.clone()
            self._causal_last = logits[:, self.valid - 1]
        return torch.cat([self.carry[:, None], logits[:, :-1]], dim=1)

    def probs(self, pred_logits: torch.Tensor) -> torch.Tensor:
        return constrained_probs(pred_logits, self.allowed, self.temperature)

    def pick(self, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return choose(probs, self.greedy, self.generator)

    def decide(self, where: torch.Tensor, tokens: torch.Tensor) -> None:
        """Write `tokens` at open positions `where` and close them."""
        where = where & self.open
        self.x = torch.where(where, tokens, self.x)
        self.open = self.open & ~where
        self.stats.tokens_decided += int(where.sum())

    def fill_first(self) -> None:
        """Position 0 from the carried causal logit: exact, and no forward of its own."""
        probs = constrained_probs(self.carry[:, None], self.allowed[:1], self.temperature)
        tok, _ = choose(probs, self.greedy, self.generator)
        tokens = self.x.clone()
        tokens[:, 0] = tok[:, 0]
        first = torch.zeros_like(self.open)
        first[:, 0] = True
        self.decide(first, tokens)

    def finish(self) -> torch.Tensor:
        """Commit the block unless the cache already holds its exact causal K/V; return the next carry."""
        if self._causal_x is None or not torch.equal(self._causal_x, self.x):
            self.forward(bidirectional=False)
        return self._causal_last


class Strategy(Protocol):
    name: str

    def begin_block(self, ctx: BlockContext) -> None: ...

    def step(self, ctx: BlockContext) -> None:
        """One iteration: must decide at least one open position in every row that has one."""


def decode(backend: Backend, layout: Layout, prompt: torch.Tensor, strategy: Strategy,
           options: DecodeOptions | None = None) -> tuple[torch.Tensor, DecodeStats]:
    """Decode one plan. Returns output token ids (rows, L) (rows = rollouts) and statistics."""
    opt = options or DecodeOptions()
    stats = DecodeStats(decoder=strategy.name)
    t0 = time.perf_counter()
    gen = torch.Generator(device="cpu").manual_seed(opt.seed)
    carry = backend.prefill(prompt)
    stats.stage_ms["prefill"] = (time.perf_counter() - t0) * 1000.0
    stats.forwards += 1
    stats.tokens_processed += prompt.shape[1]
    stats.forwards_per_section["prompt"] = 1
    device = carry.device
    template = torch.as_tensor(layout.template_ids, device=device)
    out = template[None].clone()
    w = backend.window
    names = layout.schema.section_names
    fork_at = layout.section_blocks(names.index("trajectory"))[0].index if "trajectory" in names else -1
    temperature = opt.temperature
    for block in layout.blocks:
        if block.index == fork_at:
            if opt.rollouts > 1:
                backend.fork(opt.rollouts, backend.prompt_len + block.start)
                out = out.expand(opt.rollouts, -1).clone()
                carry = carry.expand(opt.rollouts, -1).clone()
                temperature = opt.rollout_temperature
        x = torch.full((out.shape[0], w), layout.tokenizer.pad_id, dtype=out.dtype, device=device)
        x[:, : block.length] = out[:, block.start:block.end]
        ctx = BlockContext(backend, layout, block, x, carry, temperature, gen, stats)
        if bool(ctx.open[0, 0]):
            ctx.fill_first()
        strategy.begin_block(ctx)
        guard = ctx.open.sum(1).max().item() + 1
        while ctx.open.any():
            before = int(ctx.open.sum())
            strategy.step(ctx)
            guard -= 1
            if int(ctx.open.sum()) >= before or guard < 0:
                raise RuntimeError(f"{strategy.name} made no progress in block {block.index}")
        carry = ctx.finish()
        out[:, block.start:block.end] = ctx.x[:, : block.length]
    stats.wall_ms = (time.perf_counter() - t0) * 1000.0
    stats.stage_ms["blocks"] = stats.wall_ms - stats.stage_ms["prefill"]
    return out, stats


def ranks_desc(score: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rank of each masked entry by descending score within its row (0 = best); unmasked rank large."""
    s = torch.where(mask, score, torch.full_like(score, -math.inf))
    order = s.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(s.shape[-1], device=s.device).expand_as(order))
    return torch.where(mask, ranks, torch.full_like(ranks, s.shape[-1]))
