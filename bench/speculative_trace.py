"""Where greedy scaffold speculative decoding spends its forwards: per verification, how many tokens it
accepts and at which kind of token the draft first disagrees with the verifier; and, after a disagreement
at a waypoint's x, how close the next redraft of the following x comes (issue 12: ">= 3x fewer forwards").

The shipped `ScaffoldSpeculative` hands each greedy verification to a recorder (`recorder`); the script also
checks that every plan's tokens equal AR's.

    .venv/bin/python bench/speculative_trace.py --checkpoint trajectory_only_tiny --seed 31 --episodes 100 \
        --json bench/results/speculative_trace_trajectory_only_val31.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.evaluation.evaluate import held_out_samples  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402


class Recorder:
    """Collects what `ScaffoldSpeculative.recorder` is handed at each greedy verification (row 0)."""

    def __init__(self):
        self.records: list[dict] = []

    def __call__(self, ctx, drafted, span, ar_tokens, decided) -> None:
        self.records.append({"block_start": ctx.block.start, "diffusion_draft": bool(drafted),
                             "draft": ctx.x[0].clone(), "verifier": ar_tokens[0].clone(), "span": span[0].clone(),
                             "accepted": int((decided & span)[0].sum())})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="trajectory_only_tiny")
    ap.add_argument("--seed", type=int, default=31, help="episode seed (31: validation; 777 is for reporting)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = ckpt.load(args.checkpoint)
    samples = held_out_samples(args.seed, args.episodes)
    traced = Planner(bundle, PlannerOptions(decoder="speculative", draft_previous=False))
    tracer = Recorder()
    traced.strategy.recorder = tracer
    ar = Planner(bundle, PlannerOptions(decoder="ar", draft_previous=False))
    # which output positions spell a waypoint's x or y; `xs`: the x positions of a one-bin-token-per-axis
    # schema (trajectory_only), where the redraft after a disagreement is measured in bins
    slots = {slot.field: i for i, slot in enumerate(traced.layout.slots) if slot is not None}
    kind_of = {i: ("x" if ".x" in name else "y") for name, i in slots.items()
               if name.startswith("trajectory.") and (".x" in name or ".y" in name)}
    xs = sorted(i for name, i in slots.items() if name.startswith("trajectory.") and name.endswith(".x"))
    forwards, ar_forwards, iterations, per_iter = [], [], [], {}
    first_miss = Counter()
    redraft = []  # after a miss at x_k: (correction d in bins, redraft error at x_(k+1) in bins)
    for s in tqdm(samples, desc="plans", unit="plan"):
        tracer.records = []
        plan, ids = traced.plan_and_ids(s.observation)
        ar_plan, ar_ids = ar.plan_and_ids(s.observation)
        if not np.array_equal(ids, ar_ids):
            raise RuntimeError("speculative tokens differ from AR's")
        forwards.append(plan.stats.forwards)
        ar_forwards.append(ar_plan.stats.forwards)
        iterations.append(len(tracer.records))
        final = ids[0]
        for i, r in enumerate(tracer.records):
            per_iter.setdefault(i, []).append(r["accepted"])
            miss = r["span"] & (r["draft"] != r["verifier"])
            if not bool(miss.any()):
                continue
            w = int(torch.nonzero(miss)[0])
            p = r["block_start"] + w
            first_miss[kind_of.get(p, "text")] += 1
            if p in xs and xs.index(p) + 1 < len(xs):
                nxt = xs[xs.index(p) + 1]
                d = int(r["verifier"][w]) - int(r["draft"][w])
                e = int(final[nxt]) - int(r["verifier"][nxt - r["block_start"]])
                redraft.append((d, e))
    d = np.array([a for a, _ in redraft])
    e = np.array([b for _, b in redraft])
    out = {
        "command": " ".join(["python bench/speculative_trace.py", *sys.argv[1:]]),
        "checkpoint": args.checkpoint, "seed": args.seed, "plans": len(samples),
        "forwards_per_plan": float(np.mean(forwards)), "ar_forwards_per_plan": float(np.mean(ar_forwards)),
        "x_fewer_forwards": float(np.mean(ar_forwards) / np.mean(forwards)),
        "verifications_per_plan": float(np.mean(iterations)),
        "accepted_per_verification": {str(i): float(np.mean(v)) for i, v in sorted(per_iter.items())},
        "first_disagreement_at": dict(first_miss),
        "after_an_x_disagreement": {
            "cases": int(len(redraft)),
            "next_x_redraft_exact": float(np.mean(e == 0)) if len(e) else None,
            "next_x_redraft_exact_if_shifted_by_the_correction": float(np.mean(e == d)) if len(e) else None,
            "corr_correction_vs_next_x_error": float(np.corrcoef(d, e)[0, 1]) if len(e) > 2 else None,
            "next_x_error_minus_correction_bins": {str(k): v for k, v in Counter((e - d).tolist()).most_common(7)},
        },
    }
    print(f"{args.checkpoint}, seed {args.seed}, {len(samples)} plans: {out['forwards_per_plan']:.2f} forwards per plan "
          f"(AR {out['ar_forwards_per_plan']:.1f}: {out['x_fewer_forwards']:.2f}x fewer), "
          f"{out['verifications_per_plan']:.2f} verifications")
    print("| verification | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 |")
    print("|---|" + "---|" * 8)
    print("| tokens accepted (mean) | " + " | ".join(f"{np.mean(per_iter[i]):.2f}" if i in per_iter else "" for i in range(8)) + " |")
    print("first disagreement at:", dict(first_miss))
    print("after a disagreement at x_k:", json.dumps(out["after_an_x_disagreement"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
