"""Plan quality on held-out synthetic episodes, per decoder and rollout count,
against a constant-velocity baseline and the expert. Markdown table, JSON and PNGs."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

METHODS: list[tuple[str, str, dict, int]] = [
    ("ar", "ar", {}, 1),
    ("diffusion", "diffusion", {}, 1),
    ("speculative", "speculative", {}, 1),
    ("s2d2", "s2d2", {}, 1),
    ("speculative N=2", "speculative", {}, 2),
    ("speculative N=4", "speculative", {}, 4),
    ("speculative N=8", "speculative", {}, 8),
]


def collides(plan_xy: np.ndarray, sample, keep: np.ndarray) -> bool:
    """Approximate: an object centre inside the ego footprint grown by the object's half width,
    with the ego heading taken along the planned path."""
    from ddrive_ros.sim.sample import EGO_HALF_EXTENTS
    from ddrive_ros.trajectory import path_yaw_speed

    if sample.objects_future.shape[0] == 0:
        return False
    yaw, _ = path_yaw_speed(plan_xy, sample.future_times[keep], 0.0, sample.observation.speed)
    d = sample.objects_future[:, keep] - plan_xy[None]  # (A, T, 2)
    c, s = np.cos(yaw)[None], np.sin(yaw)[None]
    lon = d[..., 0] * c + d[..., 1] * s
    lat = -d[..., 0] * s + d[..., 1] * c
    grow = sample.objects_half_extents[:, 1][:, None]
    return bool(np.any((np.abs(lon) < EGO_HALF_EXTENTS[0] + grow) & (np.abs(lat) < EGO_HALF_EXTENTS[1] + grow)))


def f1(pred: list[dict], truth: list[dict]) -> float:
    tp = sum(p[k] and t[k] for p, t in zip(pred, truth) for k in t)
    fp = sum(p[k] and not t[k] for p, t in zip(pred, truth) for k in t)
    fn = sum((not p[k]) and t[k] for p, t in zip(pred, truth) for k in t)
    return 2 * tp / max(2 * tp + fp + fn, 1)


def score(name: str, preds: list[np.ndarray], samples, plans=None, horizon: float = 5.0) -> dict[str, Any]:
    """Metrics over the model's horizon (5 s for fast_ddrive, 4 s for trajectory_only)."""
    from ddrive_ros.trajectory import l2_at

    keep = samples[0].future_times <= horizon + 1e-9
    times = samples[0].future_times[keep]
    truth = [s.future_xy[keep] for s in samples]
    preds = [p[keep] for p in preds]
    err = np.array([np.linalg.norm(p - t, axis=1) for p, t in zip(preds, truth)])
    l2 = [l2_at(p, t, times) for p, t in zip(preds, truth)]
    row: dict[str, Any] = {"method": name, "horizon_s": horizon, "ade": float(err.mean()), "fde": float(err[:, -1].mean())}
    for sec in (1, 2, 3, 4, 5):
        if sec <= horizon + 1e-9:
            row[f"l2_{sec}s"] = float(np.mean([d[float(sec)] for d in l2]))
    row["collision_rate"] = float(np.mean([collides(p, s, keep) for p, s in zip(preds, samples)]))
    if plans:
        labelled = [(p, s) for p, s in zip(plans, samples) if p.meta is not None and s.labels.meta is not None]
        if labelled:
            row["lat_acc"] = float(np.mean([p.meta.lateral == s.labels.meta.lateral for p, s in labelled]))
            row["lon_acc"] = float(np.mean([p.meta.longitudinal == s.labels.meta.longitudinal for p, s in labelled]))
        co = [(p.critical_objects, s.labels.critical_objects) for p, s in zip(plans, samples) if p.critical_objects]
        if co:
            row["co_f1"] = f1([c[0] for c in co], [c[1] for c in co])
        ex = [(p.explanation.split(), (s.labels.explanation or "").split()) for p, s in zip(plans, samples) if p.explanation is not None]
        if ex:
            row["expl_acc"] = float(np.mean([np.mean([a == b for a, b in zip(pw + [""] * len(tw), tw)]) if tw else 1.0 for pw, tw in ex]))
        row["forwards_per_plan"] = float(np.mean([p.stats.forwards for p in plans]))
        row["ms_per_plan"] = float(np.mean([p.stats.wall_ms for p in plans]))
    return row


def evaluate(checkpoint, episodes: int, seed: int, per_episode: int = 1, methods: str = "all",
             plots: str | None = None, rollout_temperature: float = 0.3) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.sim.sample import samples_from_world
    from ddrive_ros.planner import Planner, PlannerOptions
    from ddrive_ros.trajectory import constant_velocity_prediction

    bundle = ckpt.load(checkpoint)
    samples_all = list(samples_from_world(seed, episodes, stride_s=1.0))
    by_ep: dict[int, list] = {}
    for s in samples_all:
        by_ep.setdefault(s.episode_seed, []).append(s)
    samples = []
    for eps in by_ep.values():
        idx = np.linspace(0, len(eps) - 1, min(per_episode, len(eps))).round().astype(int)
        samples += [eps[i] for i in idx]
    log.info("evaluating on %d samples from %d held-out episodes (seed %d)", len(samples), len(by_ep), seed)
    times = samples[0].future_times
    wf = bundle.schema.waypoint_field()
    horizon = wf.dt * wf.count
    rows = [score("constant velocity", [constant_velocity_prediction(s.observation.speed, s.observation.yaw_rate, times)
                                        for s in samples], samples, horizon=horizon),
            score("expert", [s.future_xy for s in samples], samples, horizon=horizon)]
    chosen = [m for m in METHODS if methods == "all" or m[0] in methods.split(",")]
    kept_plans = {}
    for name, decoder, knobs, n in tqdm(chosen, desc="methods"):
        planner = Planner(bundle, PlannerOptions(decoder=decoder, knobs=knobs, rollouts=n, rollout_temperature=rollout_temperature))
        plans = [planner.plan(s.observation) for s in tqdm(samples, desc=name, leave=False)]
        rows.append(score(name, [p.trajectory[:, 1:3] for p in plans], samples, plans, horizon))
        kept_plans[name] = plans
    if plots:
        draw(Path(plots), samples, kept_plans, bundle)
    return rows


def draw(out: Path, samples, plans: dict, bundle, n: int = 4) -> None:
    import cv2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddrive_ros.sim.camera import default_cameras

    out.mkdir(parents=True, exist_ok=True)
    main = "speculative N=4" if "speculative N=4" in plans else next(iter(plans))
    for k in range(min(n, len(samples))):
        s, p = samples[k], plans[main][k]
        fig, ax = plt.subplots(figsize=(4, 6))
        for r in p.rollouts:
            ax.plot(-r[:, 1], r[:, 0], color="tab:blue", alpha=0.3, lw=1)
        ax.plot(-s.future_xy[:, 1], s.future_xy[:, 0], "k--", label="expert")
        ax.plot(-p.trajectory[:, 2], p.trajectory[:, 1], color="tab:red", lw=2, label=f"plan ({main})")
        for obj in s.objects_future:
            ax.plot(-obj[:, 1], obj[:, 0], color="grey", lw=0.8)
            ax.plot(-obj[0, 1], obj[0, 0], "s", color="grey", ms=4)
        ax.plot(0, 0, "^", color="tab:red", ms=8)
        meta = f"{p.meta.longitudinal}/{p.meta.lateral}" if p.meta else ""
        ax.set_title(f"{s.observation.nav_command} {meta}", fontsize=8)
        ax.set_xlabel("left (m)  [x = -y]")
        ax.set_ylabel("forward (m)")
        ax.set_aspect("equal")
        reach = max(20.0, float(np.abs(s.future_xy).max()) + 10.0, float(np.abs(p.trajectory[:, 1:3]).max()) + 10.0)
        ax.set_xlim(-reach / 2, reach / 2)
        ax.set_ylim(-5.0, reach)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"bev_{k}.png", dpi=100)
        plt.close(fig)
        imgs = s.observation.images[1]
        cams = default_cameras(imgs.shape[2], imgs.shape[1])
        tiles = []
        for img, cam in zip(imgs, cams):
            img = img.copy()
            for xy, colour in ((s.future_xy, (0, 0, 0)), (p.trajectory[:, 1:3], (255, 0, 0))):
                pts = np.concatenate([xy, np.zeros((len(xy), 1))], 1)
                uv, front = cam.project(pts)
                uv = uv[front].round().astype(np.int32)
                if len(uv) > 1:
                    cv2.polylines(img, [uv.reshape(-1, 1, 2)], False, colour, 1, cv2.LINE_AA)
            tiles.append(img)
        strip = np.concatenate(tiles, 1)
        cv2.imwrite(str(out / f"cameras_{k}.png"), cv2.cvtColor(cv2.resize(strip, None, fx=2, fy=2), cv2.COLOR_RGB2BGR))


COLUMNS = ["method", "horizon_s", "ade", "fde", "l2_1s", "l2_2s", "l2_3s", "collision_rate", "lat_acc", "lon_acc", "co_f1", "expl_acc",
           "forwards_per_plan", "ms_per_plan"]


def markdown(rows: list[dict]) -> str:
    fmt = lambda v: "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)
