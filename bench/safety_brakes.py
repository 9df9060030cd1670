"""What the node's safety check brakes for, in the episodes where it costs progress.

    .venv/bin/python bench/safety_brakes.py --limits road_user_horizon_s=5 \
        --node-runs bench/results/sim_60_val{s}_fast_ddrive_brake_objects_bins_safety_tracked_brake_ctrv.json \
        --off-runs bench/results/sim_60_val{s}_fast_ddrive_brake_objects_bins.json \
        --json bench/results/safety_brakes_whole_plan.json

`{s}` stands for the validation seeds (31, ..., 531). An episode is taken where the node's setting (`--reflect safety
--safety-perception tracked --safety-repair brake`) made less than `--min-loss` less progress than the same planner
with reflect off, and reflect off hit nobody there (what the check was for did not happen). Each is driven again as
`ddrive sim` drove it (latency 200 ms: deterministic; a PDMS unlike the saved one is an error, so `--limits` must be
the thresholds the saved run used) and every plan whose draft broke a road-user rule (collision, TTC, clearance,
following) is described by its worst such violation: the road user (a pedestrian: under 1 m long; standing: under
0.3 m/s; else by its heading against the ego's: same way within 0.5 rad, oncoming beyond 2.6 rad, crossing between)
and the time into the plan of the first waypoint flagged. The table counts plans and episodes by road user and gives
the quartiles of that time.

Diagnosis only: it reads validation runs (never the held-out seed) and changes no model.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEEDS = (31, 131, 231, 331, 431, 531)
NODE = "speculative+safety"
OFF = "speculative"


def road_user_class(o) -> str:
    """'pedestrian' or 'vehicle', then 'standing' or its heading against the ego's (ego frame at the plan)."""
    who = "pedestrian" if o.length < 1.0 else "vehicle"
    if math.hypot(o.vx, o.vy) < 0.3:
        return f"{who} standing"
    rel = abs((o.yaw + math.pi) % (2 * math.pi) - math.pi)
    return f"{who} {'same way' if rel < 0.5 else 'oncoming' if rel > 2.6 else 'crossing'}"


def costly_episodes(node_pattern: str, off_pattern: str, min_loss: float) -> list[tuple[int, dict]]:
    """(validation seed, the node run's episode record) where the node lost `min_loss` progress to reflect off and
    reflect off had no at-fault collision."""
    from ddrive_ros.sim.compare import load_episodes

    out = []
    for s in SEEDS:
        node_path, off_path = Path(node_pattern.format(s=s)), Path(off_pattern.format(s=s))
        for p in (node_path, off_path):
            if "_val" not in p.name:
                raise ValueError(f"{p}: only validation runs are read here (the held-out seed is for reporting)")
        node, off = load_episodes(node_path, NODE), load_episodes(off_path, OFF)
        out += [(s, node[e]) for e in sorted(node) if e in off and node[e]["ep"] < off[e]["ep"] - min_loss
                and off[e]["at_fault_collisions"] == 0]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--node-runs", required=True, help="saved runs of the node's setting, {s} for the seed")
    ap.add_argument("--off-runs", required=True, help="saved reflect-off runs of the same seeds, {s} for the seed")
    ap.add_argument("--limits", default="", help="the check's thresholds the node runs used, as `ddrive sim "
                                                 "--safety-limits` takes them (default: Limits()'s)")
    ap.add_argument("--min-loss", type=float, default=0.1, help="progress (EP) lost to reflect off")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.commands.sim import safety_limits_arg
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.reflection.safety import ROAD_USER_KINDS, Limits, check
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.sample import default_renderer
    from ddrive_ros.sim.safety_context import TrackedBoxes

    torch.set_num_threads(1)
    limits = Limits(**safety_limits_arg(args.limits)) if args.limits else Limits()
    todo = costly_episodes(args.node_runs, args.off_runs, args.min_loss)
    planner = Planner(ckpt.load(args.checkpoint), PlannerOptions(decoder="speculative", reflect="safety",
                                                                 safety_repair="brake"))
    brakes: list[dict] = []

    class Describing:
        """The planner, describing each plan whose draft broke a road-user rule."""

        episode = -1

        def plan(self, obs, context=None):
            plan = planner.plan(obs, context)
            if plan.draft_waypoints is None or context is None:
                return plan
            meta = plan.meta
            found = [v for v in check(plan.draft_waypoints, plan.waypoint_times, context,
                                      meta.longitudinal if meta else None, meta.lateral if meta else None)
                     if v.kind in ROAD_USER_KINDS]
            if found:
                worst = found[0]  # most costly first
                brakes.append({"episode_seed": self.episode, "t": round(float(obs.stamp), 2), "kind": worst.kind,
                               "road_user": road_user_class(context.obstacles[worst.obstacle]),
                               "first_flag_s": float(plan.waypoint_times[worst.waypoints[0]])})
            return plan

    model = Describing()
    driver = ModelDriver(model, planner.restart_sampling, TrackedBoxes(limits))
    opts = LoopOptions(latency_ms=200.0)
    opts.renderer = default_renderer()
    for s, e in tqdm(todo, desc="costly episodes", unit="ep"):
        model.episode = int(e["seed"])
        expert = run_episode(model.episode, "expert", None, opts)
        run = run_episode(model.episode, "learned", lambda w: driver.bind(w), opts, expert.score.progress_m)
        if abs(run.score.pdms - float(e["pdms"])) > 1e-6:
            raise ValueError(f"episode {model.episode} of validation seed {s}: PDMS {run.score.pdms:.4f} here, "
                             f"{e['pdms']} saved (other weights, or other --limits than the saved run used?)")

    plans = Counter(b["road_user"] for b in brakes)
    episodes: dict[str, set] = defaultdict(set)
    times: dict[str, list] = defaultdict(list)
    for b in brakes:
        episodes[b["road_user"]].add(b["episode_seed"])
        times[b["road_user"]].append(b["first_flag_s"])
    print(f"\n{len(todo)} episodes of {len(SEEDS)} validation seeds where the node's setting lost over {args.min_loss} "
          f"progress to reflect off, which hit nobody there; {len(brakes)} plans broke a road-user rule\n")
    print("| road user | plans | episodes | first flagged waypoint, s into the plan (10/25/50/75/90 %) |")
    print("|---|---|---|---|")
    rows = []
    for who, n in plans.most_common() + [("all", len(brakes))]:
        t = [b["first_flag_s"] for b in brakes] if who == "all" else times[who]
        q = [float(x) for x in np.percentile(t, [10, 25, 50, 75, 90])] if t else []
        eps = len({b["episode_seed"] for b in brakes}) if who == "all" else len(episodes[who])
        rows.append({"road_user": who, "plans": n, "episodes": eps, "first_flag_s_quantiles": q})
        print(f"| {who} | {n} | {eps} | {' / '.join(f'{x:.1f}' for x in q)} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "limits": args.limits or "defaults",
                                               "node_runs": args.node_runs, "off_runs": args.off_runs,
                                               "episodes": [int(e["seed"]) for _, e in todo], "table": rows,
                                               "plans": brakes}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
