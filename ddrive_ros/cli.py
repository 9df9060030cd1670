"""`ddrive`: one command with subcommands. `ddrive SUBCOMMAND --help` explains each."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# subcommand -> module with `register(subparsers)`; imported lazily so `ddrive schema` never loads torch or rclpy
SUBCOMMANDS = {
    "schema": "ddrive_ros.commands.schema",
    "model-info": "ddrive_ros.commands.model_info",
    "bench": "ddrive_ros.commands.bench",
    "make-bag": "ddrive_ros.commands.make_bag",
    "train": "ddrive_ros.commands.train",
    "eval": "ddrive_ros.commands.eval",
    "replay": "ddrive_ros.commands.replay",
    "demo": "ddrive_ros.commands.demo",
    "export": "ddrive_ros.commands.export",
    "sim": "ddrive_ros.commands.sim",
    "rl": "ddrive_ros.commands.rl",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddrive",
        description="Discrete-diffusion driving planner: schema, model, decoding, training, evaluation, ROS replay, export.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (FileNotFoundError, ValueError) as e:
        print(f"ddrive {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
