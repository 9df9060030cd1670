"""Two checkpoints driving the same closed-loop episodes, drawn from above side by side: where one
collides, leaves the road or misses its manoeuvre and the other does not.

    .venv/bin/python bench/closed_loop_pair.py --checkpoints candidates/fast_ddrive_bins_tiny_turn_onsets,fast_ddrive_tiny \
        --labels "round 12,round 13 (DAgger)" --seed 777 --episodes 1223005727,1448286729,3046738276 \
        --runs bench/results/sim_100_fast_ddrive_turn_onsets.json,bench/results/sim_100_fast_ddrive_dagger_bins.json \
        --png docs/closed_loop_pair_dagger.png

Each episode is one block: a row per checkpoint, `--frames` bird's-eye views over the driven part (the ego at the
bottom, the plan in red, the expert's path in green; a run that ended early, at a collision or off the road, shows
its last step in the remaining columns). The planners run as `ddrive sim --methods speculative --latency-ms 200`
(`--num-threads 1`), so an episode scores as in a saved run of that command on the same seed: with `--runs` (one
saved `ddrive sim` JSON per checkpoint) each row's PDMS is checked against the saved one, and a mismatch is an error.
Picking episodes out of a held-out run to show is reporting, not tuning: nothing here feeds back into a model.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def saved_pdms(path: str, method: str = "speculative") -> dict[int, float]:
    """Episode seed -> PDMS of `method` in a saved `ddrive sim --json` run."""
    data = json.loads(Path(path).read_text())
    if "episodes" not in data:
        raise ValueError(f"{path}: no 'episodes' list (is it a `ddrive sim --json` run?)")
    return {int(e["seed"]): float(e["pdms"]) for e in data["episodes"] if e.get("method") == method}


def snapshot_steps(start: int, end: int, n: int) -> list[int]:
    """n steps spread over the driven part [start, end] (end included)."""
    if n < 1:
        raise ValueError(f"--frames must be at least 1, got {n}")
    return [int(round(v)) for v in np.linspace(start, end, n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", required=True, help="comma-separated checkpoint folders or shipped names (a row each; two to compare)")
    ap.add_argument("--labels", default=None, help="comma-separated row labels (default: the checkpoint names)")
    ap.add_argument("--seed", type=int, default=777, help="the `ddrive sim --seed` the episodes come from")
    ap.add_argument("--episodes", required=True, help="comma-separated episode seeds (the `seed` of a saved run's episodes)")
    ap.add_argument("--runs", default=None, help="comma-separated saved `ddrive sim --json` runs, one per checkpoint, to check PDMS against")
    ap.add_argument("--frames", type=int, default=5, help="bird's-eye views per row")
    ap.add_argument("--size", type=int, default=200, help="px per view")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--png", default="docs/closed_loop_pair.png")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.evaluation import draw
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.sample import default_renderer, episode_seeds
    from ddrive_ros.sim.sim_video import bev_frame

    torch.set_num_threads(1)
    names = [c for c in args.checkpoints.split(",") if c]
    labels = args.labels.split(",") if args.labels else names
    if len(labels) != len(names):
        raise ValueError(f"--labels gives {len(labels)} names for {len(names)} checkpoints")
    runs_files = args.runs.split(",") if args.runs else []
    if runs_files and len(runs_files) != len(names):
        raise ValueError(f"--runs gives {len(runs_files)} files for {len(names)} checkpoints")
    saved = [saved_pdms(f) for f in runs_files]
    try:
        wanted = [int(s) for s in args.episodes.split(",") if s]
    except ValueError as e:
        raise ValueError(f"--episodes must be comma-separated integers: {args.episodes!r}") from e
    known = set(episode_seeds(args.seed, 1000))
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise ValueError(f"episode seeds {unknown} are not among the first 1000 episodes of --seed {args.seed}")

    opts = LoopOptions(latency_ms=args.latency_ms)
    opts.renderer = default_renderer()
    drivers = []
    for name in names:
        planner = Planner(ckpt.load(name), PlannerOptions(decoder="speculative"))
        drivers.append(ModelDriver(planner, planner.restart_sampling))

    blocks, rows = [], []
    for ep in tqdm(wanted, desc="episodes"):
        expert = run_episode(ep, "expert", None, opts)
        runs = [run_episode(ep, label, lambda w, d=d: d.bind(w), opts, expert.score.progress_m)
                for label, d in zip(labels, drivers)]
        start = expert.world.start_step
        steps = snapshot_steps(start, max(r.world.k for r in runs), args.frames)
        panels = [draw.label_strip(f"episode {ep} ({expert.world.scenario.kind}, {expert.world.scenario.nav_command})",
                                   args.size * args.frames)]
        for i, (label, run) in enumerate(zip(labels, runs)):
            s = run.score
            if saved and ep not in saved[i]:
                raise ValueError(f"episode {ep} is not in {runs_files[i]} (a run on another --seed?)")
            if saved and abs(saved[i][ep] - s.pdms) > 1e-6:
                raise ValueError(f"episode {ep}, {label}: PDMS {s.pdms:.4f} here, {saved[i][ep]} in {runs_files[i]} "
                                 "(different weights, latency or decoder?)")
            views = [bev_frame(run, min(k, run.world.k), expert, size=args.size) for k in steps]
            ended = "" if run.world.terminated in ("running", "duration") else f", ended: {run.world.terminated}"
            panels.append(draw.label_strip(f"{label}: PDMS {s.pdms:.2f}, NC {s.nc:g}, DAC {s.dac:g}{ended}",
                                           args.size * args.frames))
            panels.append(draw.side_by_side(*views))
            rows.append({"episode_seed": ep, "kind": expert.world.scenario.kind, "checkpoint": names[i], "label": label,
                         "pdms": s.pdms, "nc": s.nc, "dac": s.dac, "ep": s.ep, "ttc": s.ttc,
                         "terminated": run.world.terminated})
        blocks.append(draw.stacked(*panels))
    draw.write_png(args.png, draw.stacked(*blocks))
    print(f"wrote {args.png}")
    print("| episode | kind | " + " | ".join(labels) + " |\n|---|---|" + "---|" * len(labels))
    for ep in wanted:
        r = [x for x in rows if x["episode_seed"] == ep]
        print(f"| {ep} | {r[0]['kind']} | " + " | ".join(f"{x['pdms']:.3f} ({x['terminated']})" for x in r) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": args.seed, "latency_ms": args.latency_ms, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
