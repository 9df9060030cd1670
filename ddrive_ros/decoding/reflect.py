"""Decision, draft, reflect: revising a decoded trajectory in token space, on the cached prefix.

- `AutoEdit` (after ReflectDrive-2): the same model reads the drafted trajectory block, fully
  visible, in one bidirectional forward per block and predicts every position; a position is
  rewritten where the drafted token is less than `ratio` times as likely as the prediction (a ratio,
  not an absolute confidence: ordinal soft targets spread a bin token's mass over its neighbours,
  so a sure prediction may carry only 0.2 of it; at ratio 0.5 a bin is moved when the draft is
  two or more bins off, a digit whenever the model prefers another one clearly). Blocks after the first
  are committed with a causal forward so the next block sees the edited tokens. The model learns
  this from the repair objective (training/perturb.py); position 0 of a block is predicted by the
  previous block's causal logit only, which never sees the draft, so it is never edited.
- `SafetyReflect` (after ReflectDrive): the safety check (reflection/safety.py) finds the
  violations and the earliest waypoint responsible; a local search over nearby positions of that
  waypoint finds a safe anchor; the anchor's tokens and the waypoints before it are pinned and the
  rest of the trajectory is inpainted by the plan's own decoder from the trajectory's start in the
  cache (no re-prefill, earlier sections untouched). Up to `rounds` rounds; each rollout row keeps
  its first safe result, else its least-bad one. A lane change or turn that the plan's meta names
  but its trajectory does not make is no matter for an anchor (one moved waypoint is a kink, not a
  manoeuvre): the trajectory is resampled from the same prefix instead, `resamples` times at
  `resample_temperature`, and a sample is kept where it costs less. The manoeuvre is in the
  model's distribution when its greedy plan goes straight on (bench/lane_change_onset.py).
Both touch nothing but editable trajectory tokens; rollouts reflect each on their own fork.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ddrive_ros.decoding.block_loop import Strategy, TrajectoryStart, decode_block
from ddrive_ros.decoding.sampling import constrained_probs
from ddrive_ros.plan import DecodeStats, Plan
from ddrive_ros.planner_options import PlannerOptions
from ddrive_ros.reflection import safety
from ddrive_ros.runtime.backend import Backend
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout

MODES = ("off", "autoedit", "safety", "both")


def _count(stats: DecodeStats, n_rows: int, w: int) -> None:
    stats.forwards += 1
    stats.tokens_processed += n_rows * w
    stats.forwards_per_section["reflect"] = stats.forwards_per_section.get("reflect", 0) + 1


@dataclass
class AutoEdit:
    tau: float = 0.5  # rewrite where p(draft) < tau * p(prediction); 0 never edits, 1 edits every disagreement
    rounds: int = 1  # passes over the trajectory
    name: str = "autoedit"

    def __call__(self, backend: Backend, layout: Layout, out: torch.Tensor, start: TrajectoryStart,
                 strategy: Strategy, stats: DecodeStats) -> torch.Tensor:
        forwards0 = stats.forwards
        edited = torch.zeros((), dtype=torch.long, device=out.device)
        out = out.clone()
        for _ in range(self.rounds):
            for i, block in enumerate(start.blocks):
                bt = start.masks.blocks[block.index]
                x = torch.full((out.shape[0], backend.window), layout.tokenizer.pad_id, dtype=out.dtype, device=out.device)
                x[:, : block.length] = out[:, block.start:block.end]
                pos = backend.prompt_len + block.start
                action = bool(layout.action[block.start])
                logits = backend.step(x, pos, block.length, True, action)
                _count(stats, x.shape[0], x.shape[1])
                # entry j predicts window position j + 1 (it sees the whole draft)
                probs = constrained_probs(logits[:, :-1], bt.allowed[1:], 0.0)
                conf, tok = probs.max(-1)
                p_draft = probs.gather(-1, x[:, 1:, None])[..., 0]
                edit = bt.editable[None, 1:] & (tok != x[:, 1:]) & (p_draft < self.tau * conf)
                x[:, 1:] = torch.where(edit, tok, x[:, 1:])
                edited += edit.sum()
                out[:, block.start:block.end] = x[:, : block.length]
                if i + 1 < len(start.blocks):  # the next block must see the edited tokens in the cache
                    backend.step(x, pos, block.length, False, action)
                    _count(stats, x.shape[0], x.shape[1])
        stats.reflect.setdefault("modes", []).append(self.name)
        stats.reflect["edited_tokens"] = stats.reflect.get("edited_tokens", 0) + int(edited)
        stats.reflect["forwards"] = stats.reflect.get("forwards", 0) + stats.forwards - forwards0
        return out


REPAIRS = ("inpaint", "brake")


@dataclass
class SafetyReflect:
    codec: Codec
    context: safety.SafetyContext
    rounds: int = 3
    resamples: int = 0  # trajectory samples for a manoeuvre not made (0: never, and the rule is not checked)
    resample_temperature: float = 0.6
    # "inpaint": the earliest offending waypoint is anchored (safety.search_anchor) and the model decodes the later
    # ones again, ReflectDrive's way; "brake": for a road user (the worst violation a collision, ttc, clearance or
    # following) the whole trajectory is written as the gentlest slow-down along its own path that the check scores
    # better (safety.search_brake), braking from now; the plan's own kinematics and meta are mended as with inpaint
    repair: str = PlannerOptions.safety_repair
    name: str = "safety"

    def __post_init__(self) -> None:
        if self.repair not in REPAIRS:
            raise ValueError(f"safety repair must be one of {', '.join(REPAIRS)}, got {self.repair!r}")
        lim = self.context.limits
        # without the road's lanes the manoeuvre rule cannot tell a lane change already under way, and resampling
        # pushes it further: on 360 validation episodes with the road users as static boxes (the node's case) it cost
        # PDMS -0.014 (SE 0.007) against no resampling, and 4 more drives off the road (docs/reflection.md, "With the
        # road users and no map"). So the rule and its resampling need a corridor; the stats say when they were
        # skipped for want of one.
        self.resampling_skipped = self.resamples > 0 and self.context.corridor is None
        if self.resampling_skipped:
            self.resamples = 0
        if self.resamples > 0 and lim.change_min_m is None and lim.turn_min_deg is None:
            # resampling is for the manoeuvre rule: check it (the context's own thresholds win where it has them)
            self.context = replace(self.context, limits=replace(lim, **safety.MANOEUVRE_LIMITS))

    def _check(self, ids: torch.Tensor) -> list[tuple[Plan, list[safety.Violation], float]]:
        rows = []
        for row in ids.cpu().numpy():
            plan = self.codec.decode(row)
            meta = plan.meta
            v = safety.check(plan.waypoints, plan.waypoint_times, self.context,
                             meta.longitudinal if meta else None, meta.lateral if meta else None)
            rows.append((plan, v, safety.cost(v)))
        return rows

    def __call__(self, backend: Backend, layout: Layout, out: torch.Tensor, start: TrajectoryStart,
                 strategy: Strategy, stats: DecodeStats) -> torch.Tensor:
        forwards0 = stats.forwards
        best = out.clone()
        best_rows = self._check(best)  # (plan, violations, cost) of each row's best so far
        first = [sorted({v.kind for v in vs}) for _, vs, _ in best_rows]
        traj_editable = torch.zeros(out.shape[1], dtype=torch.bool, device=out.device)
        for block in start.blocks:
            traj_editable[block.start:block.end] = start.masks.blocks[block.index].editable[: block.length]
        template = start.masks.template.to(out.device)
        rounds = 0
        while rounds < self.rounds and any(c > 0 for _, _, c in best_rows):
            pinned = traj_editable[None].expand(out.shape[0], -1).clone()  # rows left as they are
            x = best.clone()
            anchored = 0
            for r, (plan, violations, c) in enumerate(best_rows):
                anchorable = [v for v in violations if v.kind in safety.ANCHORED]
                if c <= 0 or not anchorable:
                    continue
                lon, lat = (plan.meta.longitudinal, plan.meta.lateral) if plan.meta else (None, None)
                keep = torch.zeros_like(traj_editable)
                worst = max(anchorable, key=lambda v: safety.cost([v]))
                if self.repair == "brake" and worst.kind in safety.ROAD_USER_KINDS:
                    slowed = safety.search_brake(plan.waypoints, plan.waypoint_times, self.context, lon, lat)
                    if slowed is None:
                        continue
                    written = list(enumerate(slowed))  # every waypoint: the slow-down as scored
                else:  # the plan's own kinematics or meta: the anchor, as with inpaint
                    found = safety.search_anchor(plan.waypoints, plan.waypoint_times, self.context, worst, lon, lat)
                    if found is None:
                        continue
                    k, xy = found
                    for j in range(k):  # the waypoints before the anchor stay
                        keep[self.codec.waypoint_positions(j)] = True
                    written = [(k, np.asarray(xy))]
                for j, xy in written:
                    for p, tok in self.codec.waypoint_tokens(j, xy).items():
                        x[r, p] = tok
                        keep[p] = True
                pinned[r] = keep & traj_editable
                x[r] = torch.where(traj_editable & ~keep, template, x[r])  # the rest is masked again
                anchored += 1
            if anchored == 0:
                break
            rounds += 1
            if bool((traj_editable[None] & ~pinned).any()):  # tokens to decode again (brake writes them all)
                carry = start.carry
                for block in start.blocks:
                    carry = decode_block(backend, layout, start.masks, x, block, carry, strategy, start.temperature,
                                         start.generator, stats, pinned)
            for r, row in enumerate(self._check(x)):
                if row[2] < best_rows[r][2]:
                    best[r], best_rows[r] = x[r], row
        resampled = self._resample(backend, layout, best, best_rows, start, strategy, stats, traj_editable, template)
        after = best_rows
        stats.reflect.setdefault("modes", []).append(self.name)
        stats.reflect.update(
            violations_before=first, violations_after=[sorted({v.kind for v in vs}) for _, vs, _ in after],
            safe=all(c <= 0 for _, _, c in after), safety_rounds=rounds, resampled_rows=resampled,
            resampling_skipped_no_corridor=self.resampling_skipped,
            forwards=stats.reflect.get("forwards", 0) + stats.forwards - forwards0,
            violations=[[{"kind": v.kind, "waypoints": list(v.waypoints), "severity": round(float(v.severity), 3),
                          "message": v.message} for v in vs] for _, vs, _ in after])
        return best

    def _resample(self, backend: Backend, layout: Layout, best: torch.Tensor, best_rows: list, start: TrajectoryStart,
                  strategy: Strategy, stats: DecodeStats, traj_editable: torch.Tensor, template: torch.Tensor) -> int:
        """Rows whose meta names a lane change or turn their trajectory does not make get `resamples` trajectories
        sampled from the same prefix (the other rows ride along pinned); a sample that costs less replaces
        the row in `best` / `best_rows` in place. Seeded from the plan's own generator: a plan is repeatable.
        Returns how many rows were replaced."""
        need = [any(v.kind == "manoeuvre" for v in vs) for _, vs, _ in best_rows]
        if self.resamples <= 0 or not any(need):
            return 0
        gen = torch.Generator(device=start.carry.device).manual_seed(start.generator.initial_seed() + 104729)
        rows = torch.tensor(need, device=best.device)
        pinned = traj_editable[None].expand(best.shape[0], -1) & ~rows[:, None]  # rows not resampled stay
        replaced: set[int] = set()
        for _ in range(self.resamples):
            x = torch.where(rows[:, None] & traj_editable[None], template[None], best)
            carry = start.carry
            for i, block in enumerate(start.blocks):  # the last block's commit would write K/V nobody reads
                carry = decode_block(backend, layout, start.masks, x, block, carry, strategy,
                                     self.resample_temperature, gen, stats, pinned, commit=i + 1 < len(start.blocks))
            for r, row in enumerate(self._check(x)):
                if need[r] and row[2] < best_rows[r][2]:
                    best[r], best_rows[r] = x[r], row
                    replaced.add(r)
        return len(replaced)


def edit_given_trajectory(backend: Backend, layout: Layout, prompt: torch.Tensor, ids: torch.Tensor,
                          reflector: Any) -> torch.Tensor:
    """Reflect on a trajectory handed in (ids (1, L), e.g. a perturbed expert), not on the model's own
    draft: prefill, commit the sections before the trajectory causally, then run `reflector`."""
    from ddrive_ros.decoding.layout_tensors import layout_tensors

    names = layout.schema.section_names
    blocks = layout.section_blocks(names.index("trajectory"))
    carry = backend.prefill(prompt)
    for block in layout.blocks[: blocks[0].index]:
        x = torch.full((ids.shape[0], backend.window), layout.tokenizer.pad_id, dtype=ids.dtype, device=ids.device)
        x[:, : block.length] = ids[:, block.start:block.end]
        carry = backend.step(x, backend.prompt_len + block.start, block.length, False,
                             bool(layout.action[block.start]))[:, block.length - 1]
    masks = layout_tensors(layout, backend.window, backend.vocab_size, carry.device)
    start = TrajectoryStart(carry, blocks, masks, 0.0, torch.Generator(device=carry.device).manual_seed(0))
    return reflector(backend, layout, ids.clone(), start, None, DecodeStats())


@dataclass
class Chain:
    steps: list[Any] = field(default_factory=list)

    def __call__(self, backend, layout, out, start, strategy, stats):
        for step in self.steps:
            out = step(backend, layout, out, start, strategy, stats)
        return out


def make_reflector(mode: str, codec: Codec, context: safety.SafetyContext | None, autoedit_tau: float = 0.5,
                   safety_rounds: int = 3, manoeuvre_resamples: int = PlannerOptions.manoeuvre_resamples,
                   safety_repair: str = PlannerOptions.safety_repair) -> Any | None:
    """The reflector for a mode (None for off). `context` is required for safety modes."""
    if mode not in MODES:
        raise ValueError(f"unknown reflect mode {mode!r}; choose one of {', '.join(MODES)}")
    steps: list[Any] = []
    if mode in ("autoedit", "both"):
        steps.append(AutoEdit(tau=autoedit_tau))
    if mode in ("safety", "both"):
        if context is None:
            raise ValueError(f"reflect={mode} needs a safety context (at least the ego speed)")
        if manoeuvre_resamples < 0:
            raise ValueError(f"manoeuvre_resamples must be >= 0, got {manoeuvre_resamples}")
        steps.append(SafetyReflect(codec, context, rounds=safety_rounds, resamples=manoeuvre_resamples,
                                   repair=safety_repair))
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else Chain(steps)
