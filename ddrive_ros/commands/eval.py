"""`ddrive eval`: plan quality on held-out synthetic episodes against trivial baselines."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ddrive_ros.commands.sim import LOGIT_BIAS_HELP, accel_clip, logit_bias_arg
from ddrive_ros.planner_options import PlannerOptions


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out synthetic episodes")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder or shipped model name (default: fast_ddrive_tiny)")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=777, help="episode seed; training uses other seeds")
    p.add_argument("--per-episode", type=int, default=1, help="anchors per episode")
    p.add_argument("--methods", default="all", help="comma-separated method names, or all")
    p.add_argument("--rollout-temperature", type=float, default=PlannerOptions.rollout_temperature,
                   help="sampling temperature of the trajectory rollouts (default: the planner's)")
    p.add_argument("--reflect", default="off",
                   help="comma-separated reflect modes (off, autoedit, safety, both); each but off adds a "
                        "'<method>+<mode>' row; safety gets the samples' true road users")
    p.add_argument("--speed-smoothing", type=float, default=None, metavar="WEIGHT",
                   help="jerk penalty of the speed profile along the decoded path (speed_smoothing.py; 0 off; "
                        "default: the planner's)")
    p.add_argument("--accel-clip", type=accel_clip, default=None, metavar="LO,HI",
                   help="clamp the acceleration the model reads to [LO, HI] m/s^2 (default: the planner's, none)")
    p.add_argument("--logit-bias", type=logit_bias_arg, default=None, metavar="SPEC", help=LOGIT_BIAS_HELP)
    p.add_argument("--json", default=None)
    p.add_argument("--plots", default=None, help="folder for PNGs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.evaluation.evaluate import evaluate, markdown

    rows = evaluate(args.checkpoint, args.episodes, args.seed, args.per_episode, args.methods, args.plots,
                    args.rollout_temperature, args.reflect, args.speed_smoothing, args.accel_clip, args.logit_bias)
    print(markdown(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        from ddrive_ros.timeline import ACCEL_WINDOW_S

        config = {"checkpoint": args.checkpoint or "fast_ddrive_tiny", "episodes": args.episodes, "seed": args.seed,
                  "speed_smoothing": args.speed_smoothing if args.speed_smoothing is not None
                  else PlannerOptions.speed_smoothing,
                  "accel_clip": args.accel_clip, "accel_window_s": ACCEL_WINDOW_S,
                  "logit_bias": args.logit_bias}
        Path(args.json).write_text(json.dumps({"rows": rows, "config": config}, indent=2))
    return 0
