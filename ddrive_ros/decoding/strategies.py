"""Per-block strategies over the shared loop in block_loop.py. Each `step` is one iteration."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ddrive_ros.decoding import tree
from ddrive_ros.decoding.block_loop import BlockContext, ranks_desc
from ddrive_ros.decoding.sampling import first_true, greedy_choice, verify, verify_greedy


class Autoregressive:
    """Token-causal decoding: one causal forward per open position, left to right.
    Run on a block-size-1 layout it is the plain AR baseline."""

    name = "ar"

    def begin_block(self, ctx: BlockContext) -> None:
        pass

    def step(self, ctx: BlockContext) -> None:
        tok, _ = ctx.choose_tokens(ctx.forward(bidirectional=False))
        first = first_true(ctx.open)
        idx = torch.arange(ctx.w, device=tok.device)[None]
        ctx.decide(idx == first[:, None], tok)


@dataclass
class SectionDiffusion:
    """Denoise each block with bidirectional forwards: accept every open position whose
    confidence >= tau and at least the most confident one; or, with `steps`, exactly that
    many forwards per block (ceil(open / steps_left) per step), as CUDA graphs want."""

    tau: float = 0.9
    steps: int = 0
    name: str = "diffusion"

    def begin_block(self, ctx: BlockContext) -> None:
        ctx.steps_left = self.steps

    def step(self, ctx: BlockContext) -> None:
        probs = ctx.probs(ctx.forward(bidirectional=True))
        tok, conf = ctx.pick(probs)
        rank = ranks_desc(conf, ctx.open)
        if self.steps > 0:
            k = torch.ceil(ctx.open.sum(1, keepdim=True) / max(ctx.steps_left, 1))
            ctx.steps_left -= 1
        else:
            k = torch.ones(ctx.n, 1, device=conf.device)
        ctx.decide((rank < k) | (conf >= self.tau), tok)


@dataclass
class ScaffoldSpeculative:
    """Fast-dDrive scaffold speculative decoding. Scaffold is already in place; one diffusion
    forward drafts every open position; one causal forward verifies; keep the longest prefix that
    equals the AR choice plus the AR token at the first mismatch. Greedy output equals AR greedy.

    redraft: how the positions a verification leaves open are drafted again.
      "diffusion": another bidirectional forward (two forwards per iteration);
      "causal": the verification's own predictions for them (Jacobi-style: conditioned on the
        draft they replace), so every iteration after a block's first is one causal forward.
      "action" (default): causal in trajectory (action) blocks, diffusion elsewhere. Waypoint digits
        redraft well from the verifier (trajectory_only: 12.8 -> 7.5 forwards per plan); text
        does not (the full plan's explanation: 16 -> 24), so each block gets the one that pays.
    Either way the verifier decides, so greedy output still equals AR and sampled output still
    follows the AR distribution (the proposal's probabilities enter the acceptance rule).

    A block with a prior draft (`decode(..., prior=...)`: the previous plan carried forward) takes it
    as its first draft: no draft forward, and a block whose prior is accepted whole costs one forward.

    tree: rows per greedy verification of a trajectory block after a correction (decoding/tree.py);
    1 verifies the redraft alone. More rows confirm more waypoints per forward at the price of a
    batch of that many rows: nearly free on a GPU, about linear on a CPU."""

    redraft: str = "action"
    tree: int = 1
    tree_depth: int = 1  # 2: the candidates branch at two waypoints (decoding/tree.py)
    name: str = "speculative"
    uses_prior = True  # not a field: a class fact the planner reads
    # not a field: an instance may set it to see every greedy verification,
    # recorder(ctx, drafted, span, ar_tokens, decided) (bench/speculative_trace.py)
    recorder = None

    def __post_init__(self) -> None:
        if self.redraft not in ("diffusion", "causal", "action"):
            raise ValueError(f"speculative redraft must be 'diffusion', 'causal' or 'action', not {self.redraft!r}")
        if int(self.tree) != self.tree or self.tree < 1:
            raise ValueError(f"speculative tree must be a whole number of rows >= 1, not {self.tree!r}")
        self.tree = int(self.tree)
        if self.tree_depth not in (1, 2):
            raise ValueError(f"speculative tree_depth must be 1 or 2, not {self.tree_depth!r}")

    def begin_block(self, ctx: BlockContext) -> None:
        ctx.next_draft = ctx.prior_draft()
        if ctx.prior is not None and self.tree > 1 and ctx.greedy and ctx.action and ctx.n == 1:
            table = tree.ordinal(ctx.layout, ctx.x.device)
            if table is not None:  # the outside draft is verified with its coordinates shifted, too
                ctx.tree_hint = tree.prior_hint(table, ctx.block.start, ctx.open)

    def step(self, ctx: BlockContext) -> None:
        drafted = ctx.next_draft is None  # this iteration's draft is the diffusion stream's
        if drafted:
            draft, draft_probs = ctx.choose_tokens(ctx.forward(bidirectional=True))
        else:
            # a draft is verified once: after it the block's open positions are redrafted as the
            # block's kind says (a prior draft must not be offered again for positions it got wrong)
            draft, draft_probs = ctx.next_draft
            ctx.next_draft = None
        span = ctx.open.clone()
        ctx.x = torch.where(span, draft, ctx.x)
        redraft = self.redraft == "causal" or (self.redraft == "action" and ctx.action)
        table = tree.ordinal(ctx.layout, ctx.x.device) if self.tree > 1 and ctx.greedy and ctx.action else None
        if table is not None and ctx.n == 1:
            self._tree_step(ctx, table, drafted, span, redraft)
            return
        logits = ctx.forward(bidirectional=False)
        if ctx.greedy:
            # greedy verification compares with the AR argmax (no softmax), which is also the redraft
            ar_tokens = greedy_choice(logits, ctx.bias)
            tokens, decided, _ = verify_greedy(ctx.x, ar_tokens, span)
            next_draft = (ar_tokens, None)
            if self.recorder is not None:
                self.recorder(ctx, drafted, span, ar_tokens, decided)
        else:
            ar = ctx.probs(logits)
            tokens, decided, _ = verify(ctx.x, draft_probs, ar, span, False, ctx.generator)
            next_draft = (ctx.pick(ar)[0], ar) if redraft else None
        ctx.x = torch.where(span & ~decided, torch.full_like(ctx.x, ctx.mask_id), ctx.x)
        ctx.decide(decided, tokens)
        if redraft:
            ctx.next_draft = next_draft

    def _tree_step(self, ctx: BlockContext, table: tree.Ordinal, drafted: bool, span: torch.Tensor,
                   redraft: bool) -> None:
        """A greedy verification over candidate rows (decoding/tree.py); keeps the row that agrees longest."""
        start = ctx.block.start
        cand = (tree.rows(table, start, ctx.x, span, ctx.tree_hint, self.tree, self.tree_depth)
                if ctx.tree_hint is not None else None)
        if cand is None:
            logits, cand = ctx.forward(bidirectional=False), ctx.x
        else:
            logits = ctx.forward_rows(cand)
        ar_tokens = greedy_choice(logits, ctx.bias)
        rows_span = span.expand(cand.shape[0], -1)
        tokens, decided, rejected = verify_greedy(cand, ar_tokens, rows_span)
        keep = decided.sum(1).argmax()  # first of the longest: row 0 on a tie
        x, ar_tokens, tokens, decided, rejected = (t[keep][None] for t in (cand, ar_tokens, tokens, decided, rejected))
        ctx.x = x
        if self.recorder is not None:
            self.recorder(ctx, drafted, span, ar_tokens, decided)
        ctx.tree_hint = tree.hint(table, start, x, ar_tokens, rejected, ctx.w)
        ctx.x = torch.where(span & ~decided, torch.full_like(ctx.x, ctx.mask_id), ctx.x)
        ctx.decide(decided, tokens)
        if redraft:
            ctx.next_draft = (ar_tokens, None)


@dataclass
class S2D2:
    """Self-speculative block diffusion (S2D2): threshold drafting; the first contiguous open span
    is verified by the same model in causal mode only when the routing policy says it pays.

    policy: "always" | "min_span" | "score" | "hysteresis"
    confidence: "margin" (top1 - top2) or "entropy" (exp(-beta * H / log|allowed|)) estimates of
    the acceptance rate alpha_i. Score = expected accepted prefix sum_k prod_{i<=k} alpha_i plus the
    bonus token, minus the tokens threshold acceptance would take anyway (N_hi, at least 1), minus
    the cost c of the extra forward. Hysteresis switches verification on above `high`, off below `low`.
    """

    tau: float = 0.9
    policy: str = "score"
    confidence: str = "margin"
    min_span: int = 2
    beta: float = 1.0
    cost: float = 1.0
    high: float = 0.5
    low: float = -0.5
    name: str = "s2d2"

    def begin_block(self, ctx: BlockContext) -> None:
        ctx.verify_on = torch.zeros(ctx.n, dtype=torch.bool, device=ctx.x.device)  # hysteresis state, per block

    def _alpha(self, probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        if self.confidence == "margin":
            top = probs.topk(2, dim=-1).values
            return top[..., 0] - top[..., 1]
        h = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
        h_max = allowed.sum(-1).clamp_min(2).float().log()[None]
        return torch.exp(-self.beta * h / h_max)

    def _route(self, ctx: BlockContext, span: torch.Tensor, probs: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
        span_len = span.sum(1)
        if self.policy == "always":
            return span_len > 0
        if self.policy == "min_span":
            return span_len >= self.min_span
        alpha = torch.where(span, self._alpha(probs, ctx.allowed), torch.ones_like(conf))
        expected = torch.where(span, torch.cumprod(alpha, dim=1), torch.zeros_like(alpha)).sum(1)
        n_hi = (span & (conf >= self.tau)).sum(1).clamp_min(1)
        score = expected + 1.0 - n_hi - self.cost
        if self.policy == "score":
            return (score > 0) & (span_len > 0)
        if self.policy == "hysteresis":
            ctx.verify_on = torch.where(score > self.high, True, torch.where(score < self.low, False, ctx.verify_on))
            return ctx.verify_on & (span_len > 0)
        raise ValueError(f"unknown S2D2 routing policy {self.policy!r}")

    def step(self, ctx: BlockContext) -> None:
        draft_probs = ctx.probs(ctx.forward(bidirectional=True))
        draft, conf = ctx.pick(draft_probs)
        # first contiguous open span per row
        idx = torch.arange(ctx.w, device=draft.device)[None]
        first = first_true(ctx.open)
        after_gap = first_true((idx > first[:, None]) & ~ctx.open)
        span = ctx.open & (idx >= first[:, None]) & (idx < after_gap[:, None])
        route = self._route(ctx, span, draft_probs, conf)
        rank = ranks_desc(conf, ctx.open)
        threshold = ctx.open & ((conf >= self.tau) | (rank < 1))
        # whether to spend the verify forward is S2D2's routing decision: its iterations read the
        # device twice (this and the loop's status), the other decoders once
        if bool(route.any()):
            span = span & route[:, None]
            proposal = torch.where(span, draft, ctx.x)
            saved = ctx.x
            ctx.x = proposal
            ar_probs = ctx.probs(ctx.forward(bidirectional=False))
            ctx.x = saved
            tokens, decided, _ = verify(proposal, draft_probs, ar_probs, span, ctx.greedy, ctx.generator)
            # verified rows take the verifier's span result plus confident positions beyond the span
            beyond = route[:, None] & ctx.open & ~span & (conf >= self.tau) & (idx > first[:, None])
            plain = ~route[:, None] & threshold
            ctx.decide(decided, tokens)
            ctx.decide(beyond | plain, draft)
        else:
            ctx.decide(threshold, draft)


def make_strategy(name: str, **knobs) -> object:
    """Decoder by name: ar | diffusion | speculative | s2d2 (knobs are the dataclass fields)."""
    table = {"ar": Autoregressive, "diffusion": SectionDiffusion, "speculative": ScaffoldSpeculative, "s2d2": S2D2}
    if name not in table:
        raise ValueError(f"unknown decoder {name!r}; choose one of {sorted(table)}")
    cls = table[name]
    fields = getattr(cls, "__dataclass_fields__", {})
    unknown = set(knobs) - set(fields)
    if unknown:
        raise ValueError(f"decoder {name} has no knobs {sorted(unknown)}; it takes {sorted(f for f in fields if f != 'name')}")
    return cls(**knobs)


def uses_block_size_one(name: str) -> bool:
    """The AR baseline runs on a block-size-1 layout."""
    return name == "ar"

