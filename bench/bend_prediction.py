"""Why the safety check follows a road user's bend: one plan of the shipped planner on a closed-loop episode, an
oncoming car's predicted path two ways, and where it really drove.

    .venv/bin/python bench/bend_prediction.py --seed 131 --episode 2096388927 --step 44 \
        --png docs/bend_prediction.png --json bench/results/bend_prediction_val131.json

The planner drives the episode as `ddrive sim --methods speculative --reflect safety --safety-perception tracked
--latency-ms 200` does (the node's defaults: tracked boxes, brake repair). At `--step` the plan and the tracked boxes
are taken; for each road user the check flags with its yaw rate set to 0 (constant velocity along its heading: the
check's prediction before round 19) the picture draws that prediction, the prediction along its bend (constant speed
and yaw rate, `reflection/safety.predict`) and the road user's true path over the plan's horizon, in the ego frame
of the plan, with the lane lines. The JSON holds the check's violations under each prediction. Picking an episode
of a validation seed to show is reporting, not tuning.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--seed", type=int, default=131, help="the `ddrive sim --seed` the episode comes from")
    ap.add_argument("--episode", type=int, required=True, help="the episode's seed (a saved run's `seed` field)")
    ap.add_argument("--step", type=int, required=True, help="the world step of the plan (one the planner plans at)")
    ap.add_argument("--png", default="docs/bend_prediction.png")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner, PlannerOptions
    from ddrive_ros.reflection.safety import check, predict
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.sample import default_renderer, episode_seeds
    from ddrive_ros.sim.safety_context import TrackedBoxes
    from ddrive_ros.sim.sim_video import lane_lines
    from ddrive_ros.sim.world import SIM_DT
    from ddrive_ros.trajectory import world_to_ego

    if args.episode not in episode_seeds(args.seed, 1000):
        raise SystemExit(f"episode {args.episode} is not among the first 1000 episodes of seed {args.seed}")
    torch.set_num_threads(1)
    planner = Planner(ckpt.load(args.checkpoint), PlannerOptions(decoder="speculative", reflect="safety"))
    tracked = TrackedBoxes()
    taken: dict = {}

    def context_of(world):
        ctx = tracked(world)
        if world.k == args.step:
            taken["context"] = ctx
        return ctx

    plans: list = []
    plan = planner.plan

    def recording_plan(obs, context=None):
        out = plan(obs, context)
        plans.append(out)
        return out

    planner.plan = recording_plan
    driver = ModelDriver(planner, planner.restart_sampling, context_of)
    opts = LoopOptions(latency_ms=200.0)
    opts.renderer = default_renderer()
    run = run_episode(args.episode, "speculative+safety", lambda w: driver.bind(w), opts)
    if "context" not in taken:
        raise SystemExit(f"no plan at step {args.step} of episode {args.episode} (plans at "
                         f"{[p.k_obs for p in run.plans][:8]} ...)")
    at = [i for i, p in enumerate(run.plans) if p.k_obs == args.step][0]
    chosen, ctx, world = plans[at], taken["context"], run.world
    wp, times = chosen.waypoints, chosen.waypoint_times
    straight_ctx = dataclasses.replace(ctx, obstacles=tuple(dataclasses.replace(o, yaw_rate=0.0) for o in ctx.obstacles))
    v_straight, v_bend = check(wp, times, straight_ctx), check(wp, times, ctx)
    flagged = sorted({int(v.message.split("obstacle ")[1].split(")")[0]) for v in v_straight if "(obstacle " in v.message})
    if not flagged:
        raise SystemExit(f"at step {args.step} the check flags no road user even along its heading: pick another step")
    k, pose_xy, yaw = args.step, world.ego_xy[args.step], float(world.ego_yaw[args.step])
    t = np.arange(1, 11) * 0.5
    xy_straight, _, _ = predict(straight_ctx.obstacles, t)
    xy_bend, _, _ = predict(ctx.obstacles, t)
    agents_now = world_to_ego(world.agent_xy[:, k], pose_xy, yaw)
    steps = np.minimum(k + np.round(t / SIM_DT).astype(int), world.k)

    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for line in lane_lines(world, k):
        ax.plot(line[:, 0], line[:, 1], color="0.75", lw=0.8)
    ax.plot(np.r_[0.0, wp[:, 0]], np.r_[0.0, wp[:, 1]], "o-", color="tab:red", ms=3, label="the plan (ego, 5 s)")
    out = {"seed": args.seed, "episode": args.episode, "step": k, "checkpoint": args.checkpoint, "road_users": [],
           "violations_along_heading": [v.message for v in v_straight],
           "violations_along_bend": [v.message for v in v_bend]}
    for n, i in enumerate(flagged):
        o = ctx.obstacles[i]
        a = int(np.argmin(np.hypot(*(agents_now - [o.x, o.y]).T)))  # the world's road user under the box
        true = world_to_ego(world.agent_xy[a, steps], pose_xy, yaw)
        lab = (lambda s: s) if n == 0 else (lambda s: None)
        ax.plot(xy_straight[:, i, 0], xy_straight[:, i, 1], "x--", color="tab:orange", ms=4,
                label=lab("along its heading (yaw rate 0, before)"))
        ax.plot(xy_bend[:, i, 0], xy_bend[:, i, 1], "o-", color="tab:blue", ms=3,
                label=lab(f"along its bend (yaw rate {o.yaw_rate:+.2f} rad/s, now)"))
        ax.plot(true[:, 0], true[:, 1], "s", mfc="none", color="tab:green", ms=6, label=lab("where it drove"))
        ax.plot(o.x, o.y, "k^", ms=7, label=lab("the oncoming car now"))
        err = lambda p: float(np.mean(np.hypot(*(p - true).T)))  # noqa: E731
        out["road_users"].append({"obstacle": i, "x": o.x, "y": o.y, "yaw": o.yaw, "vx": o.vx, "vy": o.vy,
                                  "yaw_rate": o.yaw_rate, "mean_error_m_along_heading": err(xy_straight[:, i]),
                                  "mean_error_m_along_bend": err(xy_bend[:, i])})
    ax.set_aspect("equal")
    ax.set_xlim(-5, max(90.0, float(np.max(wp[:, 0])) + 5))
    ax.set_ylim(-20, 40)
    ax.set_xlabel("x ahead (m)")
    ax.set_ylabel("y left (m)")
    ax.set_title(f"episode {args.episode} of seed {args.seed}, t = {k * SIM_DT:.1f} s: "
                 f"{len(v_straight)} violations along the heading, {len(v_bend)} along the bend", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(json.dumps(out, indent=1))
    print(f"wrote {args.png}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
