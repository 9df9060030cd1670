"""How far apart are a planner's N sampled rollouts, and how far is their mean from the greedy plan?

N=4 rollouts (PlannerOptions.rollouts, sampled at rollout_temperature from the shared prefix; the planner drives
their mean) pay only if the rollouts are small variations of one plan. On samples of a validation seed (31 by
default; never the reporting seed 777) this plans each observation greedily and with N rollouts and reports, per
model: the lateral spread of the rollouts' 5 s end points (max - min, m), the mean's distance from the greedy
plan at 5 s, and how often the spread exceeds a lane width (3.5 m).

    .venv/bin/python bench/rollout_spread.py --checkpoints fast_ddrive_tiny,trajectory_only_tiny --samples 40 \\
        --json bench/results/rollout_spread_val31.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.evaluation.evaluate import held_out_samples  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402

LANE_M = 3.5


def spread_rows(name: str, samples, rollouts: int, temperature: float) -> dict:
    bundle = ckpt.load(name)
    greedy = Planner(bundle, PlannerOptions(decoder="speculative"))
    sampled = Planner(bundle, PlannerOptions(decoder="speculative", rollouts=rollouts, rollout_temperature=temperature))
    spreads, offsets = [], []
    for s in tqdm(samples, desc=name, leave=False):
        g = greedy.plan(s.observation)
        p = sampled.plan(s.observation)
        ends = np.array([r[-1] for r in p.rollouts])  # (N, 2): each rollout's 5 s point, ego frame
        spreads.append(float(ends[:, 1].max() - ends[:, 1].min()))
        offsets.append(float(np.linalg.norm(p.trajectory[-1, 1:3] - g.trajectory[-1, 1:3])))
    spreads, offsets = np.array(spreads), np.array(offsets)
    return {"model": name, "samples": len(samples), "rollouts": rollouts, "temperature": temperature,
            "lateral_spread_m_median": float(np.median(spreads)), "lateral_spread_m_p90": float(np.percentile(spreads, 90)),
            "share_spread_over_lane": float(np.mean(spreads > LANE_M)),
            "mean_vs_greedy_5s_m_median": float(np.median(offsets)), "mean_vs_greedy_5s_m_p90": float(np.percentile(offsets, 90))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", default="fast_ddrive_tiny,trajectory_only_tiny")
    ap.add_argument("--seed", type=int, default=31, help="episode seed (a validation seed; 777 is for reporting)")
    ap.add_argument("--samples", type=int, default=40, help="episodes, one sample each")
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=PlannerOptions.rollout_temperature)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.rollouts < 2:
        ap.error("--rollouts must be >= 2")
    torch.set_num_threads(args.threads)
    samples = held_out_samples(args.seed, args.samples)
    rows = [spread_rows(name, samples, args.rollouts, args.temperature) for name in args.checkpoints.split(",")]
    print(f"N={args.rollouts} rollouts at temperature {args.temperature}, {len(samples)} samples of seed {args.seed}")
    print("| model | lateral spread at 5 s, median / p90 (m) | spread > one lane | mean vs greedy at 5 s, median / p90 (m) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['lateral_spread_m_median']:.2f} / {r['lateral_spread_m_p90']:.2f} | "
              f"{r['share_spread_over_lane']:.2f} | {r['mean_vs_greedy_5s_m_median']:.2f} / {r['mean_vs_greedy_5s_m_p90']:.2f} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"command": "python bench/rollout_spread.py " + " ".join(sys.argv[1:]),
                                               "seed": args.seed, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
