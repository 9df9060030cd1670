"""Planner node latency per stage and achieved planning rate, per decoder, with a shipped model.

A benchmark, not a test: it writes a synthetic bag, then for each decoder starts the real
`ddrive_planner` node (separate process, Fast DDS, sim time), replays the bag at recorded
timing with the node asked to plan at --rate-hz, and reports per-stage latency percentiles,
plans per second of bag time and skipped ticks. Results: bench/results/node_<checkpoint>.json.

    .venv/bin/python bench/node_rate.py --checkpoint trajectory_only_tiny --rate-hz 10
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ddrive_ros.sim.bag_writer import write_bag
from ddrive_ros.ros.replay import ReplayOptions, replay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="trajectory_only_tiny")
    ap.add_argument("--decoders", default="speculative,ar,diffusion,s2d2")
    ap.add_argument("--rate-hz", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", default="torch", help="torch | onnx | cuda_graph | tensorrt")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddrive_node_bench_"))
    bag = tmp / "bag"
    write_bag(bag, [5], duration_s=args.duration, progress=False)
    rows = []
    for decoder in args.decoders.split(","):
        opts = ReplayOptions(bag=bag, out=tmp / decoder, start_node=True, frames=0,
                             node_params={"checkpoint": args.checkpoint, "decoder": decoder,
                                          "planning_rate_hz": args.rate_hz, "num_threads": args.threads,
                                          "backend": args.backend})
        rep = replay(opts)
        plans = rep.get("plans") or 0
        last = {k: v for d in rep.get("outputs", {}).get("diagnostics", [])[-1:] for st in d["status"]
                for k, v in st["values"].items()}
        rows.append({"decoder": decoder, "plans": plans, "plans_per_bag_s": plans / args.duration,
                     "skipped_ticks": last.get("skipped_ticks"), "ticks": last.get("ticks"), "ade_m": rep.get("ade_m"),
                     "latency_ms": rep.get("latency_ms", {})})
    print(f"node benchmark: {args.checkpoint} on {args.backend}, planning_rate_hz {args.rate_hz}, {args.duration:.0f} s bag, "
          f"{args.threads} torch threads")
    print(f"{'decoder':<13}{'plans/s':>8}{'skipped':>8}  " + "  ".join(f"{k} p50/p90" for k in rows[0]["latency_ms"]))
    for r in rows:
        lat = "  ".join(f"{v['p50']:.1f}/{v['p90']:.1f}" if v else "-" for v in r["latency_ms"].values())
        print(f"{r['decoder']:<13}{r['plans_per_bag_s']:>8.2f}{str(r['skipped_ticks']):>8}  {lat}")
    out = Path(args.json or f"bench/results/node_{Path(args.checkpoint).name}_{args.backend}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"checkpoint": args.checkpoint, "backend": args.backend, "rate_hz": args.rate_hz, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
