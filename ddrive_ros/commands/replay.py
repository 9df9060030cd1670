"""`ddrive replay`: play a rosbag2 into a live planner node, record its outputs, score them."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a rosbag2 into the planner node (no ROS 2 CLI needed); record and score",
                       description=__doc__)
    p.add_argument("--bag", required=True, help="rosbag2 folder with camera, /odom and /navigation/command topics")
    p.add_argument("--rate", type=float, default=1.0, help="playback rate (1.0 = recorded timing)")
    p.add_argument("--out", default=None, help="folder for the recorded output bag, frames/ and node.log")
    p.add_argument("--json", default=None, help="write the metrics report as JSON here")
    p.add_argument("--frames", type=int, default=6, help="PNG frames to write into OUT/frames (0: none)")
    p.add_argument("--start-node", action="store_true",
                   help="start the planner node as a subprocess (use_sim_time, own ROS_DOMAIN_ID)")
    p.add_argument("--checkpoint", default=None,
                   help="with --start-node: checkpoint (folder, shipped name, or random:tiny:fast_ddrive)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME:=VALUE",
                   help="with --start-node: extra node parameter (repeatable)")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: environment or pid-derived)")
    p.add_argument("--node-name", default="ddrive_planner",
                   help="name of the planner node whose ~/output/*, ~/debug/* topics are recorded")
    p.add_argument("--record", action="append", default=[], metavar="TOPIC:=TYPE",
                   help="record this topic instead of the node's defaults (repeatable), e.g. "
                        "/my/plan:=std_msgs/msg/String")
    p.add_argument("--clock-hz", type=float, default=100.0, help="/clock publishing rate (continuous, as --clock)")
    p.set_defaults(func=run)


def parse_params(items: list[str]) -> dict[str, object]:
    """NAME:=VALUE pairs, VALUE read as YAML the way `--ros-args -p` reads it (10 is an int, 0.5 a
    double, true a bool, anything else a string)."""
    import yaml

    out: dict[str, object] = {}
    for item in items:
        if ":=" not in item:
            raise ValueError(f"parameter {item!r} must be NAME:=VALUE")
        k, v = item.split(":=", 1)
        out[k] = yaml.safe_load(v) if v.strip() else v
    return out


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.ros.replay import ReplayOptions, format_report, replay

    params = parse_params(args.param)
    if args.checkpoint:
        params["checkpoint"] = args.checkpoint
    from ddrive_ros.ros.replay import default_outputs

    outputs = dict(item.split(":=", 1) for item in args.record) if args.record else default_outputs(args.node_name)
    report = replay(ReplayOptions(bag=args.bag, rate=args.rate, out=args.out, json=args.json, frames=args.frames,
                                  start_node=args.start_node, node_params=params, domain_id=args.domain_id,
                                  outputs=outputs, clock_hz=args.clock_hz))
    print(format_report(report))
    if report.get("frames"):
        print(f"frames: {len(report['frames'])} PNGs under {report['frames'][0].rsplit('/', 1)[0]}")
    print(f"recorded outputs: {report['recorded_bag']}")
    return 0 if report.get("plans") else 1
