"""How a learned planner drives a lane change in closed loop, plan by plan: where each plan puts the car against
the route's own lane-change path (main-road lateral offset d) 1-4 s ahead, and the car's heading against the
road's, beside the expert's on the same episode (issue 12: the full model leaves the road on right lane changes).

`--blank-motion yaw|past|both` hands the planner an observation with its yaw rate zeroed and/or its past
positions replaced by a straight line behind it at its current speed: if a planner only copies its own motion
(the copycat failure of imitation), blanking it changes the drive.

    .venv/bin/python bench/lane_change_trace.py --checkpoint fast_ddrive_tiny --seed 31 --episodes 60 \
        --indices 35,40 [--blank-motion both] [--json out.json]

Episode indices are positions in `episode_seeds(seed, episodes)`, as in `ddrive sim`'s JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402
from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode  # noqa: E402
from ddrive_ros.sim.drivers import ModelDriver  # noqa: E402
from ddrive_ros.sim.safety_context import safety_context  # noqa: E402
from ddrive_ros.sim.sample import default_renderer, episode_seeds  # noqa: E402
from ddrive_ros.timeline import PAST_TIMES  # noqa: E402

HORIZONS_S = (1.0, 2.0, 3.0, 4.0)
PLAN_DT = 0.25  # WorldPlan samples (the plan's own grid after its start pose)


class BlankedMotionDriver(ModelDriver):
    """The learned planner with its own motion blanked from the observation (see the module docstring)."""

    def __init__(self, planner, restart, mode: str):
        super().__init__(planner, restart)
        self.mode = mode

    def observation(self, t: float):
        obs = super().observation(t)
        if self.mode in ("yaw", "both"):
            obs = dataclasses.replace(obs, yaw_rate=0.0)
        if self.mode in ("past", "both"):
            obs = dataclasses.replace(obs, past_xy=np.stack([obs.speed * PAST_TIMES, np.zeros_like(PAST_TIMES)], 1))
        return obs


def relative_yaw_deg(world, k: int) -> float:
    ref = world.scenario.road_map.main.ref
    return float(np.degrees(world.ego_yaw[k] - ref.heading_at(world.ego_main_sd[k, 0])))


def trace_episode(planner: Planner, seed: int, opts: LoopOptions, blank: str | None, safety: bool = False) -> dict:
    """`safety`: hand each plan the world's true road users and corridor (perfect perception), as `ddrive sim`
    does for a planner with safety-guided reflection."""
    expert = run_episode(seed, "expert", None, opts)
    context_of = safety_context if safety else None
    driver = (BlankedMotionDriver(planner, planner.restart_sampling, blank) if blank
              else ModelDriver(planner, planner.restart_sampling, context_of))
    run = run_episode(seed, "model", lambda w: driver.bind(w), opts, expert.score.progress_m)
    w, route = run.world, run.world.scenario.ego.route
    ref = w.scenario.road_map.main.ref
    route_s, route_d = ref.project(route.path.xy)
    plans = []
    for p in run.plans:
        k = p.k_obs
        s_plan, d_plan = ref.project(p.world_plan.xy)
        d_route = np.interp(s_plan, route_s, route_d)
        idx = [min(int(round(h / PLAN_DT)), len(d_plan) - 1) for h in HORIZONS_S]
        plans.append({"t": round(k * w.dt, 2), "d": float(w.ego_main_sd[k, 1]), "yaw_deg": relative_yaw_deg(w, k),
                      "nav": str(w.nav_command[k]), "meta": p.meta,
                      "plan_minus_route_m": [float(d_plan[j] - d_route[j]) for j in idx]})
    every = int(round(0.5 / w.dt))
    driven = [k for k in range(w.start_step, len(w.t), every) if w.ego_main_sd[k, 0] != 0.0]
    return {"seed": seed, "maneuver": route.maneuver, "target_d": route.target_d,
            "pdms": run.score.pdms, "dac": run.score.dac, "expert_pdms": expert.score.pdms,
            "plans": plans,
            "model_d": [float(w.ego_main_sd[k, 1]) for k in driven],
            "model_yaw_deg": [relative_yaw_deg(w, k) for k in driven],
            "expert_d": [float(expert.world.ego_main_sd[k, 1]) for k in range(w.start_step, len(w.t), every)],
            "expert_yaw_deg": [relative_yaw_deg(expert.world, k) for k in range(w.start_step, len(w.t), every)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--episodes", type=int, default=60, help="the episode list the indices point into")
    ap.add_argument("--indices", required=True, help="comma-separated episode indices, e.g. 35,40")
    ap.add_argument("--blank-motion", choices=["yaw", "past", "both"], default=None)
    ap.add_argument("--reflect", choices=["off", "safety"], default="off",
                    help="safety: safety-guided reflection with the world's true road users and corridor, as ddrive sim")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    seeds = episode_seeds(args.seed, args.episodes)
    indices = [int(i) for i in args.indices.split(",")]
    if any(not 0 <= i < len(seeds) for i in indices):
        raise SystemExit(f"--indices must lie in 0..{len(seeds) - 1}")
    planner = Planner(ckpt.load(args.checkpoint), PlannerOptions(decoder="speculative", rollouts=1, reflect=args.reflect))
    opts = LoopOptions(latency_ms=args.latency_ms, renderer=default_renderer())
    out = []
    for i in indices:
        r = trace_episode(planner, seeds[i], opts, args.blank_motion, safety=args.reflect == "safety")
        r["index"] = i
        out.append(r)
        print(f"== episode {i} (seed {r['seed']}): {r['maneuver']}, target lane d {r['target_d']}; "
              f"PDMS {r['pdms']:.3f} (expert {r['expert_pdms']:.3f})")
        print("   t     d   yaw  nav                meta                          plan - route at 1/2/3/4 s")
        for p in r["plans"]:
            print(f"{p['t']:5.2f} {p['d']:6.2f} {p['yaw_deg']:5.1f}  {p['nav']:<18} {p['meta']:<29} "
                  + " ".join(f"{v:+.2f}" for v in p["plan_minus_route_m"]))
        print("every 0.5 s, d (m):   model  " + " ".join(f"{v:.2f}" for v in r["model_d"]))
        print("                      expert " + " ".join(f"{v:.2f}" for v in r["expert_d"]))
        print("every 0.5 s, yaw (deg): model  " + " ".join(f"{v:.1f}" for v in r["model_yaw_deg"]))
        print("                        expert " + " ".join(f"{v:.1f}" for v in r["expert_yaw_deg"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "seed": args.seed,
                                               "blank_motion": args.blank_motion, "episodes": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
