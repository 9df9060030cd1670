"""How much sooner DAgger collection ends with episodes spread over processes (`source: dagger`, `workers: N`),
and a check that the samples are the same.

    .venv/bin/python bench/dagger_workers.py --checkpoint fast_ddrive_tiny --episodes 6 --workers 1,2 \
        --json bench/results/dagger_workers.json

Each row collects the same episodes (training seed 14 by default, never evaluated on) from scratch, process start-up
and checkpoint loading included; the ratio is against the first row, measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--workers", default="1,2", help="comma-separated process counts; the first is the baseline")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from ddrive_ros.training.sources import load_samples

    torch.set_num_threads(1)
    counts = [int(w) for w in args.workers.split(",") if w]
    if not counts:
        raise ValueError("--workers names no process count")
    entry = {"source": "dagger", "checkpoint": args.checkpoint, "seed": args.seed, "episodes": args.episodes}
    rows, first = [], None
    for n in counts:
        t = time.perf_counter()
        samples = load_samples(dict(entry, workers=n))
        wall = time.perf_counter() - t
        if first is None:
            first = (samples, wall)
        same = len(samples) == len(first[0]) and all(
            a.t0 == b.t0 and np.array_equal(a.future_xy, b.future_xy) and np.array_equal(a.observation.images, b.observation.images)
            for a, b in zip(samples, first[0]))
        rows.append({"workers": n, "samples": len(samples), "wall_s": wall, "speedup": first[1] / wall,
                     "same_samples_as_first": bool(same)})
        if not same:
            raise SystemExit(f"workers={n} collected other samples than workers={counts[0]}")
    print(f"| workers | samples | wall s | x first row | same samples |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['samples']} | {r['wall_s']:.1f} | {r['speedup']:.2f}x | {r['same_samples_as_first']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "seed": args.seed,
                                               "episodes": args.episodes, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
