"""`ddrive make-bag`: simulate episodes of the synthetic world and write them as a ROS 2 bag."""
from __future__ import annotations

import argparse
import logging

from ddrive_ros.sim.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH

logger = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.sim.bag_writer import write_bag

    summary = write_bag(args.out, (args.seed, args.episodes), args.compressed, duration_s=args.duration,
                        width=args.width, height=args.height, storage=args.storage)
    counts = ", ".join(f"{topic}: {n}" for topic, n in sorted(summary.messages.items()))
    logger.info("episodes: %d, bag duration %.1f s; %s", len(summary.episodes), summary.duration_s, counts)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `make-bag` to a `ddrive` argparse sub-command set; the handler is in `func`."""
    p = subparsers.add_parser(
        "make-bag", help="simulate episodes of the synthetic world and write them as a ROS 2 bag",
        description="Simulate N episodes (seeded) and write one rosbag2 folder with three camera streams, "
                    "camera_info, /odom, /navigation/command, /ddrive/labels and episode markers.")
    p.add_argument("--episodes", type=int, default=10, help="number of episodes (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed the episode seeds derive from (default 0)")
    p.add_argument("--out", required=True, help="output bag folder; must not exist")
    p.add_argument("--compressed", action="store_true", help="write JPEG CompressedImage instead of raw rgb8")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per episode (default 12, minimum 7)")
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH, help=f"image width (default {DEFAULT_WIDTH})")
    p.add_argument("--height", type=int, default=DEFAULT_HEIGHT, help=f"image height (default {DEFAULT_HEIGHT})")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage plugin")
    p.set_defaults(func=run)
