"""Plan quality on held-out synthetic episodes, per decoder and rollout count,
against a constant-velocity baseline and the expert. Markdown table, JSON and PNGs."""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.evaluation import draw, metrics
from ddrive_ros.observation import Observation
from ddrive_ros.plan import MetaBehavior, Plan, meta_text
from ddrive_ros.reflection.safety import Obstacle, SafetyContext
from ddrive_ros.planner import Planner, PlannerOptions
from ddrive_ros.sample import Sample, label_schema
from ddrive_ros.sim.camera import default_cameras
from ddrive_ros.sim.open_loop_pdm import pdm_summary
from ddrive_ros.sim.sample import EGO_HALF_EXTENTS, samples_from_world
from ddrive_ros.timeline import FUTURE_HORIZON_S, PAST_HORIZON_S

log = logging.getLogger(__name__)

METHODS: list[tuple[str, str, dict, int]] = [
    ("ar", "ar", {}, 1),
    ("diffusion", "diffusion", {}, 1),
    ("speculative", "speculative", {}, 1),
    ("s2d2", "s2d2", {}, 1),
    ("speculative N=2", "speculative", {}, 2),
    ("speculative N=4", "speculative", {}, 4),
    ("speculative N=8", "speculative", {}, 8),
    # tree verification (decoding/tree.py): the same plans as speculative, fewer forwards, more rows per forward
    ("speculative tree=16", "speculative", {"tree": 16}, 1),
    ("speculative tree=32", "speculative", {"tree": 32}, 1),
    ("speculative tree=64x2", "speculative", {"tree": 64, "tree_depth": 2}, 1),  # 8 x 8 candidates at two waypoints
    ("speculative (nav shuffled)", "speculative", {}, 1),  # ablation: does the model read the command?
]
SHUFFLED_NAV = "speculative (nav shuffled)"


def shuffled_nav(samples: list[Sample], seed: int = 0) -> list[Observation]:
    """The samples' observations with their navigation commands permuted among them (seeded): a
    model that reads the command must lose lateral macro-F1 here."""
    commands = [s.observation.nav_command for s in samples]
    order = np.random.default_rng(seed).permutation(len(commands))
    return [dataclasses.replace(s.observation, nav_command=commands[j]) for s, j in zip(samples, order)]


def score(name: str, preds: list[np.ndarray], samples: list[Sample], plans: list[Plan] | None = None,
          horizon: float = 5.0, open_loop_pdm: bool = False) -> dict[str, Any]:
    """Metrics over the model's horizon (5 s for fast_ddrive, 4 s for trajectory_only)."""
    keep = samples[0].future_times <= horizon + 1e-9
    times = samples[0].future_times[keep]
    preds = [p[keep] for p in preds]
    row: dict[str, Any] = {"method": name, "horizon_s": horizon}
    row.update(metrics.displacement_summary(preds, [s.future_xy[keep] for s in samples], times))
    row["collision_rate"] = float(np.mean([
        metrics.collides(p, times, s.observation.speed, s.objects_future[:, keep], s.objects_half_extents,
                         EGO_HALF_EXTENTS) for p, s in zip(preds, samples)]))
    if open_loop_pdm:  # NAVSIM's protocol: each plan tracked 4 s, agents replayed (re-simulates the episodes)
        row.update(pdm_summary(preds, times, samples))
    if plans:
        row.update(behaviour_scores([p.meta for p in plans], [p.critical_objects for p in plans], samples))
        ex = [(p.explanation.split(), (s.labels.explanation or "").split()) for p, s in zip(plans, samples) if p.explanation is not None]
        if ex:
            row["expl_acc"] = float(np.mean([np.mean([a == b for a, b in zip(pw + [""] * len(tw), tw)]) if tw else 1.0 for pw, tw in ex]))
        row["forwards_per_plan"] = float(np.mean([p.stats.forwards for p in plans]))
        # rows all forwards ran over together (1 per forward without a tree or rollouts): what a CPU pays for
        if any(p.stats.tree_rows for p in plans):
            row["rows_per_plan"] = float(np.mean([p.stats.forwards - p.stats.tree_forwards + p.stats.tree_rows for p in plans]))
        row["ms_per_plan"] = float(np.mean([p.stats.wall_ms for p in plans]))
    return row


META_FIELDS = {"lat": "lateral", "lon": "longitudinal"}


def behaviour_scores(metas: list[MetaBehavior | None], objects: list[dict[str, bool]], samples: list[Sample]) -> dict[str, Any]:
    """Meta behaviour (accuracy, macro-F1, per-class recall, confusion) and critical objects (micro
    and per-object F1) against the labels, over the samples that have both."""
    row: dict[str, Any] = {}
    section = label_schema().section("future_meta_behavior")
    labelled = [(m, s.labels.meta) for m, s in zip(metas, samples) if m is not None and s.labels.meta is not None]
    if labelled:
        for key, name in META_FIELDS.items():
            classes = next(f.values for f in section.fields if f.name == name)
            pred, truth = [getattr(m, name) for m, _ in labelled], [getattr(t, name) for _, t in labelled]
            rep = metrics.classification(pred, truth, classes)
            row[f"{key}_acc"], row[f"{key}_macro_f1"] = rep["accuracy"], rep["macro_f1"]
            row[f"{key}_macro_f1_se"] = metrics.bootstrap_macro_f1_se(pred, truth, classes)
            row[f"{key}_recall"], row[f"{key}_confusion"] = rep["recall"], {"classes": rep["classes"],
                                                                             "rows_truth": rep["confusion"]}
    co = [(o, s.labels.critical_objects) for o, s in zip(objects, samples) if o and s.labels.critical_objects]
    if co:
        row["co_f1"] = metrics.f1([c[0] for c in co], [c[1] for c in co])
        row["co_f1_per_object"] = metrics.per_key_f1([c[0] for c in co], [c[1] for c in co])
    return row


def majority_row(samples: list[Sample]) -> dict[str, Any]:
    """The trivial behaviour baseline: the most frequent label of each meta field and each
    critical object on these samples, answered for every sample."""
    metas = [s.labels.meta for s in samples if s.labels.meta is not None]
    if not metas:
        return {"method": "majority class"}
    guess = MetaBehavior(**{name: Counter(getattr(m, name) for m in metas).most_common(1)[0][0]
                            for name in ("longitudinal", "lateral", "turn_signal")})
    objs = [s.labels.critical_objects for s in samples if s.labels.critical_objects]
    const = {k: Counter(o[k] for o in objs).most_common(1)[0][0] for k in objs[0]} if objs else {}
    return {"method": "majority class",
            **behaviour_scores([guess] * len(samples), [dict(const)] * len(samples), samples)}


def held_out_samples(seed: int, episodes: int, per_episode: int = 1, duration_s: float = 12.0) -> list[Sample]:
    """`per_episode` anchors spread over each of `episodes` world episodes (seeded); episodes too
    short for one anchor give none. Raises ValueError when no episode gives a sample."""
    by_ep: dict[int, list[Sample]] = {}
    for s in samples_from_world(seed, episodes, stride_s=1.0, duration_s=duration_s):
        by_ep.setdefault(s.episode_seed, []).append(s)
    if not by_ep:
        raise ValueError(f"no samples from {episodes} episodes of {duration_s:g} s (seed {seed}): episodes must last "
                         f"at least {PAST_HORIZON_S + FUTURE_HORIZON_S:g} s (past + future horizon)")
    samples = []
    for eps in by_ep.values():
        idx = np.linspace(0, len(eps) - 1, min(per_episode, len(eps))).round().astype(int)
        samples += [eps[i] for i in idx]
    if len(by_ep) < episodes:
        log.info("%d of %d episodes gave no sample (future out of range)", episodes - len(by_ep), episodes)
    return samples


def chosen_methods(methods: str) -> list[tuple[str, str, dict, int]]:
    """The METHODS rows a comma-separated `--methods` names ("all": every one), in METHODS' order. A name
    that is not a row is an error naming the rows (it used to be skipped without a word)."""
    if methods.strip() == "all":
        return list(METHODS)
    names = [m.strip() for m in methods.split(",") if m.strip()]
    known = [m[0] for m in METHODS]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown eval methods {unknown or [methods]}; choose from {known} or 'all'")
    return [m for m in METHODS if m[0] in names]


def evaluate(checkpoint, episodes: int, seed: int, per_episode: int = 1, methods: str = "all",
             plots: str | None = None, rollout_temperature: float = PlannerOptions.rollout_temperature,
             reflect: str = "off", speed_smoothing: float | None = None,
             accel_clip: tuple[float, float] | None = None,
             logit_bias: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """`reflect`: comma-separated modes (off, autoedit, safety, both); each but off adds a
    '<method>+<mode>' row after each method's row; safety gets the sample's true road users.
    `speed_smoothing`: the planner's jerk penalty along the path (None: the planner's default);
    `accel_clip`: the (lo, hi) range the model's acceleration input is clamped to (None: the planner's default);
    `logit_bias`: decode-time enum offsets (None: the checkpoint's calibration; {}: none). Each learned row
    records the offsets it decoded with."""
    smoothing = {} if speed_smoothing is None else {"speed_smoothing": float(speed_smoothing)}
    if accel_clip is not None:
        smoothing["accel_clip"] = tuple(accel_clip)
    if logit_bias is not None:
        smoothing["logit_bias"] = logit_bias
    chosen = chosen_methods(methods)
    bundle = ckpt.load(checkpoint)
    samples = held_out_samples(seed, episodes, per_episode)
    log.info("evaluating on %d samples from held-out episodes (seed %d)", len(samples), seed)
    times = samples[0].future_times
    wf = bundle.schema.waypoint_field()
    horizon = wf.dt * wf.count
    rows = [score("constant velocity", [metrics.constant_velocity_prediction(s.observation.speed, s.observation.yaw_rate, times)
                                        for s in samples], samples, horizon=horizon, open_loop_pdm=True),
            score("expert", [s.future_xy for s in samples], samples, horizon=horizon, open_loop_pdm=True),
            majority_row(samples)]
    modes = [m.strip() for m in reflect.split(",") if m.strip()]
    kept_plans = {}
    runs = [(name if mode == "off" else f"{name}+{mode}", decoder, knobs, n, mode)
            for name, decoder, knobs, n in chosen for mode in modes]
    for name, decoder, knobs, n, mode in tqdm(runs, desc="methods"):
        planner = Planner(bundle, PlannerOptions(decoder=decoder, knobs=knobs, rollouts=n,
                                                 rollout_temperature=rollout_temperature, reflect=mode, **smoothing))
        observations = shuffled_nav(samples, seed) if name.startswith(SHUFFLED_NAV) else [s.observation for s in samples]
        contexts = [sample_safety_context(s) if mode in ("safety", "both") else None for s in samples]
        plans = [planner.plan(o, c) for o, c in tqdm(list(zip(observations, contexts)), desc=name, leave=False)]
        row = score(name, [p.trajectory[:, 1:3] for p in plans], samples, plans, horizon, open_loop_pdm=True)
        if planner.logit_bias:
            row["logit_bias"] = planner.logit_bias
        if mode != "off":
            row["edited_tokens_per_plan"] = float(np.mean([p.stats.reflect.get("edited_tokens", 0) for p in plans]))
            row["reflect_forwards_per_plan"] = float(np.mean([p.stats.reflect.get("forwards", 0) for p in plans]))
            row["reflect_ms_p50"] = float(np.median([p.stats.stage_ms.get("reflect", 0.0) for p in plans]))
        rows.append(row)
        kept_plans[name] = plans
    if plots:
        write_pictures(Path(plots), samples, kept_plans)
    return rows


def sample_safety_context(sample: Sample) -> SafetyContext:
    """Perfect perception from a world sample: every road user's box at t0 with the velocity of its
    recorded future over the first step (ego frame at t0); no drivable corridor (samples carry none)."""
    times = np.asarray(sample.future_times, dtype=float)
    obstacles = []
    for xy, yaw, he in zip(sample.objects_future, sample.objects_yaw, sample.objects_half_extents):
        v = (xy[1] - xy[0]) / max(times[1] - times[0], 1e-6)
        # back from the first future point to t0 at that velocity
        p0 = xy[0] - v * times[0]
        obstacles.append(Obstacle(float(p0[0]), float(p0[1]), float(yaw[0]), 2.0 * float(he[0]), 2.0 * float(he[1]),
                                  float(v[0]), float(v[1])))
    return SafetyContext(v0=float(sample.observation.speed), obstacles=tuple(obstacles))


def sample_scene(sample: Sample, plan: Plan | None, title: str = "") -> draw.Scene:
    """What the bird's-eye view of a sample shows: the plan, its rollouts, the expert, the agents at t0."""
    agents = [draw.Box(float(xy[0, 0]), float(xy[0, 1]), float(yaw[0]), float(he[0]), float(he[1]))
              for xy, yaw, he in zip(sample.objects_future, sample.objects_yaw, sample.objects_half_extents)]
    lines = [f"nav {sample.observation.nav_command}, v0 {sample.observation.speed:.1f} m/s"]
    if plan is not None and plan.meta is not None:
        lines.append(f"plan {meta_text(asdict(plan.meta))}")
    if sample.labels.meta is not None:
        lines.append(f"expert {meta_text(asdict(sample.labels.meta))}")
    return draw.Scene(plan=None if plan is None else plan.trajectory[:, 1:3], truth=sample.future_xy,
                      rollouts=[] if plan is None else plan.rollouts,
                      waypoints=None if plan is None else plan.waypoints, agents=agents, title=title, lines=lines)


def write_pictures(out: Path, samples: list[Sample], plans: dict[str, list[Plan]], n: int = 4) -> list[Path]:
    """Per sample: bev_K.png (plan, rollouts, expert, agents from above) and cameras_K.png (plan red,
    expert green in the three current camera images)."""
    main = "speculative N=4" if "speculative N=4" in plans else next(iter(plans))
    written = []
    for k in range(min(n, len(samples))):
        s, p = samples[k], plans[main][k]
        written.append(draw.write_png(out / f"bev_{k}.png", draw.bev(sample_scene(s, p, main), size=360)))
        imgs = s.observation.images[1]
        cams = default_cameras(imgs.shape[2], imgs.shape[1])
        strip = draw.camera_strip(list(imgs), cams, [(s.future_xy, draw.TRUTH), (p.trajectory[:, 1:3], draw.PLAN)])
        written.append(draw.write_png(out / f"cameras_{k}.png", strip))
    return written


COLUMNS = ["method", "horizon_s", "ade", "fde", "l2_1s", "l2_2s", "l2_3s", "collision_rate", "pdms", "nc", "dac", "ep", "ttc",
           "comfort", "lat_acc", "lat_macro_f1", "lat_macro_f1_se", "lon_acc", "lon_macro_f1", "co_f1", "expl_acc",
           "forwards_per_plan", "rows_per_plan", "ms_per_plan"]


def markdown(rows: list[dict]) -> str:
    fmt = lambda v: "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)
