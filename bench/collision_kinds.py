"""What the learned planner's at-fault collisions are: who it hits, from where, and whether its last plan meant to stop.

    .venv/bin/python bench/collision_kinds.py --checkpoint candidates/fast_ddrive_bins_tiny_dagger \
        --runs bench/results/sim_60_val31_fast_ddrive_dagger_bins.json,bench/results/sim_60_val131_fast_ddrive_dagger_bins.json \
        --json bench/results/collision_kinds_val.json

For every episode of the saved `ddrive sim --json` runs whose `speculative` row had an at-fault collision, the episode is
driven again exactly as `ddrive sim --methods speculative --latency-ms 200 --num-threads 1` drove it (the fixed latency
makes the loop deterministic; a PDMS unlike the saved one is an error), and each at-fault contact is described:

- what was hit (the road user's kind) and how: `rear-end` (same heading within 30 deg, ahead of the ego), `crossing`
  (30-150 deg), `oncoming` (over 150 deg), `pedestrian`;
- the speeds at contact, and the ego's speed against the expert's at the same moment of the same episode;
- how long the road user had been in the ego's path (within 3 m of its heading line, 0-40 m ahead) before contact:
  under 1 s is a road user that appeared late (a cut-in, a pedestrian stepping out), over 2 s one the planner had time
  to see;
- the last plan tracked before contact: did it slow down (its lowest speed within 2 s against the ego's speed when it
  was made), and where did its 2-s point lie against the road user's position then (`planned into`: the plan's path
  crossed the spot where the road user stood)? and did the plan's critical objects name a lead vehicle?

With `--png`, the first `--pictures` rear-ends are drawn: the front camera as the model saw it (160x96, enlarged) at the
last plan observed 1.5 s or more before contact (a stop was still possible) and at its last plan, beside the bird's-eye
view of the earlier moment (the plan in red, the expert's path in green).

Diagnosis only: it reads validation runs (never the held-out seed) and changes no model.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PATH_HALF_WIDTH_M = 3.0
PATH_AHEAD_M = 40.0
DT_LOOKBACK_S = 6.0
EARLY_S = 1.5  # the "early" plan: the last one observed at least this long before contact, while a stop was still possible


def saved_episodes(path: str, method: str = "speculative") -> tuple[dict, list[dict]]:
    """(the run's config, episodes of `method` with an at-fault collision) of a saved `ddrive sim --json` run."""
    data = json.loads(Path(path).read_text())
    if "episodes" not in data or "config" not in data:
        raise ValueError(f"{path}: not a `ddrive sim --json` run (no 'episodes' or 'config')")
    cfg = data["config"]
    if cfg.get("latency_ms") in (None, "auto"):
        raise ValueError(f"{path}: ran with measured latency; only fixed-latency runs replay exactly")
    eps = [e for e in data["episodes"] if e.get("method") == method and e.get("at_fault_collisions", 0) > 0]
    return cfg, eps


def how(rel_heading: float, lon: float, kind: str) -> str:
    """The contact's geometry from the road user's heading against the ego's (rad) and its place along the ego."""
    if kind == "pedestrian":
        return "pedestrian"
    dh = abs(math.atan2(math.sin(rel_heading), math.cos(rel_heading)))
    if dh < math.radians(30):
        return "rear-end" if lon > 0 else "side, same way"
    return "oncoming" if dh > math.radians(150) else "crossing"


def in_path_seconds(world, agent: int, k: int, dt: float) -> float:
    """How long before step k the road user had been continuously in the ego's path (ahead, near its heading line)."""
    n = 0
    for j in range(k, max(k - int(DT_LOOKBACK_S / dt), world.start_step) - 1, -1):
        rel = world.agent_xy[agent, j] - world.ego_xy[j]
        c, s = math.cos(world.ego_yaw[j]), math.sin(world.ego_yaw[j])
        lon, lat = rel[0] * c + rel[1] * s, -rel[0] * s + rel[1] * c
        if not (0.0 <= lon <= PATH_AHEAD_M and abs(lat) <= PATH_HALF_WIDTH_M):
            break
        n += 1
    return n * dt


def bumper_gap(w, agent: int, k: int) -> float:
    """Metres from the ego's front bumper to the road user's nearest end along the ego's heading at step k."""
    from ddrive_ros.sim.scenario import EGO_FRONT

    rel = w.agent_xy[agent, k] - w.ego_xy[k]
    lon = rel[0] * math.cos(w.ego_yaw[k]) + rel[1] * math.sin(w.ego_yaw[k])
    return float(lon - EGO_FRONT - w.agent_size[agent, 0] / 2.0)


def describe(run, expert, k: int, agent: int, dt: float, objects: dict[int, dict] | None = None) -> dict:
    w = run.world
    kind = str(w.agent_kind[agent])
    rel = w.agent_xy[agent, k] - w.ego_xy[k]
    c, s = math.cos(w.ego_yaw[k]), math.sin(w.ego_yaw[k])
    lon, lat = rel[0] * c + rel[1] * s, -rel[0] * s + rel[1] * c
    row = {"kind": kind, "how": how(float(w.agent_yaw[agent, k] - w.ego_yaw[k]), lon, kind),
           "t_contact_s": round(k * dt, 2), "ego_v": float(w.ego_v[k]), "agent_v": float(w.agent_v[agent, k]),
           "expert_v_same_t": float(expert.world.ego_v[min(k, expert.world.k)]),
           "in_path_s": in_path_seconds(w, agent, k, dt)}
    applied = [p for p in run.plans if p.k_apply <= k]
    if applied:
        p = applied[-1]
        wp = p.world_plan
        two = wp.t <= 2.0 + 1e-9
        row["last_plan_age_s"] = round((k - p.k_apply) * dt, 2)
        row["last_plan_min_v_2s"] = float(wp.v[two].min())
        row["ego_v_at_plan"] = float(w.ego_v[p.k_obs])
        row["last_plan_brakes"] = bool(wp.v[two].min() < 0.7 * max(float(w.ego_v[p.k_obs]), 0.5))
        at = w.agent_xy[agent, p.k_obs]
        row["last_plan_passes_agent_m"] = float(np.min(np.linalg.norm(wp.xy[two] - at, axis=1)))
        row["last_plan_meta"] = p.meta
        row["last_plan_k_obs"] = int(p.k_obs)
        row["last_plan_observed_s_before"] = round((k - p.k_obs) * dt, 2)
        row["gap_at_last_plan_m"] = bumper_gap(w, agent, p.k_obs)
        named = (objects or {}).get(int(p.k_obs))
        if named is not None:
            row["last_plan_lead_vehicle"] = bool(named.get("lead_vehicle", False))
            row["last_plan_lead_braking"] = bool(named.get("lead_vehicle_braking", False))
    early = [p for p in run.plans if (k - p.k_obs) * dt >= EARLY_S - 1e-9]
    if early:
        p = early[-1]
        row["early_plan_k_obs"] = int(p.k_obs)
        row["early_plan_observed_s_before"] = round((k - p.k_obs) * dt, 2)
        row["early_gap_m"] = bumper_gap(w, agent, p.k_obs)
        row["early_ego_v"] = float(w.ego_v[p.k_obs])
        row["early_meta"] = p.meta
        named = (objects or {}).get(int(p.k_obs))
        if named is not None:
            row["early_lead_vehicle"] = bool(named.get("lead_vehicle", False))
    return row


def picture(run, expert, row: dict, renderer, size: int) -> np.ndarray:
    """One contact: the front camera at the early plan (EARLY_S or more before contact) and at the last plan, enlarged,
    beside the bird's-eye view at the early plan."""
    import cv2

    from ddrive_ros.evaluation import draw
    from ddrive_ros.observation import CAMERAS
    from ddrive_ros.sim.sim_video import bev_frame
    from ddrive_ros.sim.world import STEPS_PER_FRAME

    w = run.world

    def front(k: int) -> np.ndarray:
        cam = w.rendered(k - k % STEPS_PER_FRAME, renderer)[CAMERAS.index("front")]
        return cv2.resize(cam, (size * cam.shape[1] // cam.shape[0], size), interpolation=cv2.INTER_NEAREST)

    def said(key: str) -> str:
        return {True: "yes", False: "no", None: "?"}[row.get(key)]

    k_early = int(row.get("early_plan_k_obs", row["last_plan_k_obs"]))
    body = draw.side_by_side(front(k_early), front(int(row["last_plan_k_obs"])), bev_frame(run, k_early, expert, size=size))
    lines = [f"episode {row['episode_seed']} ({row['situation']}, {row['nav_command']}): rear-end at {row['ego_v']:.1f} m/s, "
             f"the expert at {row['expert_v_same_t']:.1f} m/s then",
             f"left: {row.get('early_plan_observed_s_before', float('nan')):.1f} s before, {row.get('early_ego_v', float('nan')):.1f} m/s, "
             f"gap {row.get('early_gap_m', float('nan')):.1f} m, lead named: {said('early_lead_vehicle')}, {row.get('early_meta', '')};  "
             f"middle: {row['last_plan_observed_s_before']:.1f} s before, gap {row['gap_at_last_plan_m']:.1f} m, "
             f"lead named: {said('last_plan_lead_vehicle')}"]
    return draw.stacked(*[draw.label_strip(t, body.shape[1]) for t in lines], body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--runs", required=True, help="comma-separated saved `ddrive sim --json` runs of this checkpoint")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None, help="draw the first --pictures rear-ends here")
    ap.add_argument("--pictures", type=int, default=4)
    ap.add_argument("--size", type=int, default=240, help="picture height in px")
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.sample import default_renderer
    from ddrive_ros.sim.scorer import collisions
    from ddrive_ros.sim.world import SIM_DT

    torch.set_num_threads(1)
    todo = []
    for path in [p for p in args.runs.split(",") if p]:
        if "_val" not in Path(path).name:
            raise ValueError(f"{path}: only validation runs are read here (the held-out seed is for reporting)")
        cfg, eps = saved_episodes(path)
        if int(cfg["seed"]) == 777:
            raise ValueError(f"{path} is a run of the held-out seed 777")
        opts = LoopOptions(duration_s=float(cfg.get("duration_s", 8.0)), plan_hz=float(cfg.get("plan_hz", 5.0)),
                           latency_ms=float(cfg["latency_ms"]))
        todo += [(path, int(cfg["seed"]), opts, e) for e in eps]
    renderer = default_renderer()
    planner = Planner(ckpt.load(args.checkpoint), PlannerOptions(decoder="speculative"))

    class NamingDriver(ModelDriver):
        """The planner, keeping each plan's critical objects by the step it observed."""

        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            self.objects: dict[int, dict] = {}

        def plan(self, t: float):
            plan, compute_s = super().plan(t)
            self.objects[int(round(t / SIM_DT))] = dict(plan.critical_objects or {})
            return plan, compute_s

    driver = NamingDriver(planner, planner.restart_sampling)

    rows, blocks = [], []
    for path, seed, opts, e in tqdm(todo, desc="collision episodes", unit="ep"):
        opts.renderer = renderer
        ep = int(e["seed"])
        driver.objects = {}
        expert = run_episode(ep, "expert", None, opts)
        run = run_episode(ep, "speculative", lambda w: driver.bind(w), opts, expert.score.progress_m)
        if abs(run.score.pdms - float(e["pdms"])) > 1e-6:
            raise ValueError(f"episode {ep} of {path}: PDMS {run.score.pdms:.4f} here, {e['pdms']} saved "
                             "(other weights, or a run with other settings?)")
        for k, agent, at_fault in collisions(run.world.trace(run.world.start_step)):
            if not at_fault:
                continue
            k_abs = k + run.world.start_step
            row = {"run": Path(path).name, "sim_seed": seed, "episode_seed": ep, "situation": e["kind"],
                   "nav_command": e["nav_command"], **describe(run, expert, k_abs, agent, SIM_DT, driver.objects)}
            rows.append(row)
            if args.png and row["how"] == "rear-end" and len(blocks) < args.pictures and "last_plan_k_obs" in row:
                blocks.append(picture(run, expert, row, renderer, args.size))

    print(f"\n{len(rows)} at-fault contacts in {len(todo)} episodes ({args.checkpoint})\n")
    print("| how | n | ego m/s at contact (mean) | expert m/s same time | in path > 2 s | last plan brakes | last plan passes within 2 m of it | last plan names a lead vehicle | so does the plan 1.5 s before |")
    print("|---|---|---|---|---|---|---|---|---|")
    for h, n in Counter(r["how"] for r in rows).most_common():
        g = [r for r in rows if r["how"] == h]
        brakes = sum(bool(r.get("last_plan_brakes")) for r in g)
        passes = sum(r.get("last_plan_passes_agent_m", 99) < 2.0 for r in g)
        named = sum(bool(r.get("last_plan_lead_vehicle")) for r in g)
        print(f"| {h} | {n} | {np.mean([r['ego_v'] for r in g]):.1f} | {np.mean([r['expert_v_same_t'] for r in g]):.1f} "
              f"| {sum(r['in_path_s'] > 2.0 for r in g)} | {brakes} | {passes} | {named} "
              f"| {sum(bool(r.get('early_lead_vehicle')) for r in g)} of {sum('early_lead_vehicle' in r for r in g)} |")
    print("\n| situation | contacts |\n|---|---|")
    for s, n in Counter(r["situation"] for r in rows).most_common():
        print(f"| {s} | {n} |")
    if args.png:
        from ddrive_ros.evaluation import draw

        if not blocks:
            raise ValueError("no rear-end contact to draw")
        draw.write_png(args.png, draw.stacked(*blocks))
        print(f"wrote {args.png}")
    if args.json:
        Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "runs": args.runs, "contacts": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
