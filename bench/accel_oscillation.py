"""Speed and acceleration of one closed-loop episode, driven by the expert, the IDM planner and learned
checkpoints: the picture of the go/stop oscillation that nuPlan's smoothed comfort check averages away.

    .venv/bin/python bench/accel_oscillation.py --checkpoints fast_ddrive_tiny,<other> --seed 31 --index 3 \
        --png docs/closed_loop_oscillation.png --json bench/results/accel_oscillation.json

`--index` picks the episode among `ddrive sim --seed S`'s episode seeds (the same episodes as a 60-episode run).
Each row reports PDMS, C and `accel_swings` (ddrive_ros/sim/scorer.py) for that episode.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", required=True, help="comma-separated checkpoint folders or shipped names")
    ap.add_argument("--labels", default=None, help="comma-separated labels (default: the checkpoint names)")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--index", type=int, default=0, help="which of the seed's episodes")
    ap.add_argument("--speed-smoothing", type=float, default=None, help="the planners' speed_smoothing (default: theirs)")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--png", default="docs/closed_loop_oscillation.png")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
    from ddrive_ros.sim.drivers import IdmPlannerDriver, ModelDriver
    from ddrive_ros.sim.sample import default_renderer, episode_seeds
    from ddrive_ros.sim.world import SIM_DT

    torch.set_num_threads(1)
    names = [c for c in args.checkpoints.split(",") if c]
    labels = args.labels.split(",") if args.labels else names
    if len(labels) != len(names):
        raise ValueError(f"--labels gives {len(labels)} names for {len(names)} checkpoints")
    seed = episode_seeds(args.seed, args.index + 1)[args.index]
    opts = LoopOptions(latency_ms=args.latency_ms)
    opts.renderer = default_renderer()
    smoothing = {} if args.speed_smoothing is None else {"speed_smoothing": float(args.speed_smoothing)}
    expert = run_episode(seed, "expert", None, opts)
    runs = [("expert", expert), ("IDM planner", run_episode(seed, "idm", lambda w: IdmPlannerDriver(w), opts,
                                                           expert.score.progress_m))]
    for name, label in tqdm(list(zip(names, labels)), desc="checkpoints"):
        planner = Planner(ckpt.load(name), PlannerOptions(**smoothing))
        driver = ModelDriver(planner, planner.restart_sampling)
        runs.append((label, run_episode(seed, label, lambda w, d=driver: d.bind(w), opts, expert.score.progress_m)))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_v, ax_a) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    rows = []
    for label, run in runs:
        tr = run.world.trace()
        t = np.arange(len(tr.ego_v)) * SIM_DT
        a = np.diff(tr.ego_v) / SIM_DT
        s = run.score
        tag = f"{label}: PDMS {s.pdms:.2f}, C {s.comfort:.0f}, {s.accel_swings} swings"
        ax_v.plot(t, tr.ego_v, label=tag)
        ax_a.plot(t[1:], a, lw=1)
        rows.append({"driver": label, "pdms": s.pdms, "comfort": s.comfort, "accel_swings": s.accel_swings,
                     "comfort_fails": s.comfort_fails})
    ax_v.set_ylabel("speed (m/s)")
    ax_a.set_ylabel("acceleration (m/s²)")
    ax_a.set_xlabel("time since the planner took over, after the 2 s history (s)")
    ax_v.legend(fontsize=8)
    ax_v.set_title(f"closed loop, episode {args.index} of seed {args.seed} ({runs[0][1].world.scenario.kind})")
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")
    print("| driver | PDMS | C | accel swings |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['driver']} | {r['pdms']:.3f} | {r['comfort']:.0f} | {r['accel_swings']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": args.seed, "index": args.index, "episode_seed": seed,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
