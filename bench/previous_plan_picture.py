#!/usr/bin/env python3
"""Forwards per plan on a stream, with and without the previous plan as the speculative draft.

Plans consecutive frames of synthetic-world episodes (seed 10_000 + seed: never trained or evaluated on)
at the node's rate with both shipped models, torch eager, in three settings: the previous-plan draft off,
on (verified block by block: the CPU backends' setting), and on with prior runs (several blocks of one kind
verified by one causal forward: the GPU backends' setting, `prior_run_positions`), and checks that all three
give the same ids plan for plan. Forward counts are exact (no timing), so the picture and
the JSON are the same on any machine. Left: forwards per plan along the stream; right: forwards by
section over the whole stream.

    python bench/previous_plan_picture.py --frames 60 --hz 5 --out docs/speed_previous_plan.png \
        --json bench/results/previous_plan_forwards.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ddrive_ros.planner import Planner  # noqa: E402
from ddrive_ros.runtime.backend import PRIOR_RUN_POSITIONS  # noqa: E402
from ddrive_ros.sim.sample import samples_from_world  # noqa: E402

MODELS = ("fast_ddrive_tiny", "trajectory_only_tiny")


def stream(seed: int, frames: int, hz: float) -> list:
    out = []
    for sample in samples_from_world(seed=10_000 + seed, n_episodes=frames // 20 + 2, stride_s=1.0 / hz, progress=False):
        out.append(sample.observation)
        if len(out) == frames:
            return out
    raise SystemExit(f"the synthetic world gave {len(out)} frames, {frames} needed")


SETTINGS = {"off": (False, 0), "on": (True, 0), "runs": (True, PRIOR_RUN_POSITIONS["cuda"])}


def measure(model: str, observations: list) -> dict:
    runs = {}
    for setting, (draft, run_positions) in SETTINGS.items():
        planner = Planner.from_checkpoint(model, draft_previous=draft)
        planner.backend.prior_run_positions = run_positions
        forwards, sections, ids = [], {}, []
        for obs in tqdm(observations, desc=f"{model} draft {setting}", unit="plan", leave=False):
            plan, row = planner.plan_and_ids(obs)
            forwards.append(plan.stats.forwards)
            ids.append(row)
            for name, n in plan.stats.forwards_per_section.items():
                sections[name] = sections.get(name, 0) + n
        runs[setting] = {"forwards": forwards, "sections": sections, "ids": ids}
    same = all(np.array_equal(a, b) and np.array_equal(a, c)
               for a, b, c in zip(runs["off"]["ids"], runs["on"]["ids"], runs["runs"]["ids"]))
    out = {"model": model, "same_ids_every_plan": same}
    for setting, r in runs.items():
        out[f"forwards_per_plan_{setting}"] = round(float(np.mean(r["forwards"])), 2)
    for setting, r in runs.items():
        out[f"forwards_{setting}"] = r["forwards"]
        out[f"sections_{setting}"] = r["sections"]
    return out


def draw(results: list[dict], stamps: list[float], hz: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(12, 3.6 * len(results)), gridspec_kw={"width_ratios": [2.2, 1]})
    starts = [i for i in range(1, len(stamps)) if stamps[i] <= stamps[i - 1]]  # a new episode: nothing to draft from
    for row, r in zip(np.atleast_2d(axes), results):
        ax, bars = row
        x = np.arange(len(r["forwards_off"]))
        ax.plot(x, r["forwards_off"], "o-", ms=3, color="tab:grey", label=f"own draft only ({r['forwards_per_plan_off']:.1f}/plan)")
        ax.plot(x, r["forwards_on"], "o-", ms=3, color="tab:blue",
                label=f"previous plan as the draft, block by block: CPU ({r['forwards_per_plan_on']:.1f}/plan)")
        ax.plot(x, r["forwards_runs"], "o-", ms=3, color="tab:orange",
                label=f"... with prior runs: GPU ({r['forwards_per_plan_runs']:.1f}/plan)")
        for s in starts:
            ax.axvline(s, color="black", lw=0.6, ls=":")
        ax.set_title(f"{r['model']}: backbone forwards per plan, {hz:g} Hz stream"
                     f" (same plans: {'yes' if r['same_ids_every_plan'] else 'NO'})", fontsize=9)
        ax.set_xlabel("plan (dotted: a new episode starts)")
        ax.set_ylabel("forwards")
        ax.legend(fontsize=8)
        names = [n for n in r["sections_off"] if n != "prompt"] + (["prior run"] if "prior run" in r["sections_runs"] else [])
        y = np.arange(len(names))
        bars.barh(y - 0.27, [r["sections_off"].get(n, 0) for n in names], 0.27, color="tab:grey", label="own draft")
        bars.barh(y, [r["sections_on"].get(n, 0) for n in names], 0.27, color="tab:blue", label="previous plan")
        bars.barh(y + 0.27, [r["sections_runs"].get(n, 0) for n in names], 0.27, color="tab:orange", label="+ prior runs")
        bars.set_yticks(y, names, fontsize=8)
        bars.invert_yaxis()
        bars.set_xlabel("forwards over the stream")
        bars.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=60, help="consecutive frames planned per model and setting")
    ap.add_argument("--hz", type=float, default=5.0, help="the stream's rate (the node's planning rate)")
    ap.add_argument("--seed", type=int, default=0, help="episode seed offset (10_000 + seed)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default="docs/speed_previous_plan.png", help="the picture")
    ap.add_argument("--json", default=None, help="write the counts here")
    args = ap.parse_args(argv)
    if args.frames < 2 or args.hz <= 0:
        raise SystemExit("--frames must be at least 2 and --hz positive")
    torch.set_num_threads(1)
    observations = stream(args.seed, args.frames, args.hz)
    results = [measure(m, observations) for m in tqdm(args.models.split(","), desc="models", unit="model")]
    draw(results, [o.stamp for o in observations], args.hz, Path(args.out))
    print("| model | forwards per plan, own draft | previous plan as the draft (CPU) | with prior runs (GPU) | same plans |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['forwards_per_plan_off']} | {r['forwards_per_plan_on']} | {r['forwards_per_plan_runs']} "
              f"| {r['same_ids_every_plan']} |")
    print(f"picture: {args.out}")
    if args.json:
        out = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
               "frames": args.frames, "hz": args.hz, "episode_seed": 10_000 + args.seed, "results": results}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if all(r["same_ids_every_plan"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
