"""`ddrive demo`: synthetic bag -> planner node (subprocess, Fast DDS) -> replay + record -> metrics and pictures.

    ddrive demo --out demo_out

Writes OUT/input_bag (the synthetic drive), OUT/recorded (the node's outputs), OUT/frames/*.png,
OUT/metrics.json and OUT/node.log; prints ADE/FDE against the bag's own future odometry and a per-stage
latency table.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("demo", help="synthetic bag -> planner node -> replay -> metrics and pictures",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    p.add_argument("--duration", type=float, default=12.0, help="seconds of synthetic driving (default 12)")
    p.add_argument("--seed", type=int, default=3, help="scenario seed of the synthetic world")
    p.add_argument("--rate", type=float, default=1.0, help="replay rate")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint (default: the shipped fast_ddrive_tiny, else random weights)")
    p.add_argument("--decoder", default=None,
                   help="ar | diffusion | speculative | s2d2 (default speculative; diffusion with 2 steps on random weights)")
    p.add_argument("--frames", type=int, default=6, help="PNG frames to write")
    p.add_argument("--planning-rate", type=float, default=5.0, help="node planning_rate_hz")
    p.set_defaults(func=run)


def make_bag(out: Path, duration: float, seed: int) -> Path:
    """The synthetic world's episode `seed` as a rosbag2 folder (rendered cameras, expert driving)."""
    from ddrive_ros.sim.bag_writer import write_bag

    if out.exists():
        shutil.rmtree(out)
    write_bag(out, [seed], duration_s=max(duration, 7.0), progress=False)
    return out


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.ros.model import DEFAULT_CHECKPOINT, shipped_available
    from ddrive_ros.ros.replay import ReplayOptions, format_report, replay

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    checkpoint = args.checkpoint
    if checkpoint is None:
        if shipped_available(DEFAULT_CHECKPOINT):
            checkpoint = DEFAULT_CHECKPOINT
        else:
            checkpoint = "random:tiny:fast_ddrive"
            print(f"note: the shipped model {DEFAULT_CHECKPOINT} is not installed (models/); using RANDOM weights, "
                  "so the plans and ADE are meaningless - this run shows the pipeline and its latency only")
    params = {"checkpoint": checkpoint, "planning_rate_hz": args.planning_rate, "num_threads": 1,
              "decoder": args.decoder or "speculative"}
    if args.decoder is None and checkpoint.startswith("random:"):
        # random weights rarely agree with themselves, so speculative decoding degrades to ~1 token per forward
        params.update(decoder="diffusion", steps=2)
    print(f"[1/3] writing a {args.duration:.0f} s synthetic bag ...")
    bag = make_bag(out / "input_bag", args.duration, args.seed)
    print(f"      {bag} (synthetic world, episode seed {args.seed})")
    print(f"[2/3] starting the planner node ({checkpoint}, decoder {params['decoder']}) and replaying at rate {args.rate} ...")
    report = replay(ReplayOptions(
        bag=bag, rate=args.rate, out=out, json=out / "metrics.json", frames=args.frames, start_node=True,
        node_params=params,
        discovery_timeout_s=180.0))
    print("[3/3] results")
    print(format_report(report))
    rss = [kb for _, kb in report.get("node_rss_kb", []) if kb > 0]
    if rss:
        print(f"node RSS {rss[0] / 1024:.0f} -> {rss[-1] / 1024:.0f} MB; node started in {report['node_wait_s']} s")
    print(f"pictures: {out / 'frames'} ({len(report.get('frames', []))} PNG)   metrics: {out / 'metrics.json'}")
    print(f"recorded outputs: {report['recorded_bag']}   node log: {report.get('node_log')}")
    print(f"done in {time.monotonic() - t0:.0f} s")
    return 0 if report.get("plans") else 1
