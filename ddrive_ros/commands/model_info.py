"""`ddrive model-info`: parameter counts of a model config (built with random weights)."""
from __future__ import annotations

import argparse
import json


def register(sub) -> None:
    p = sub.add_parser("model-info", help="parameter counts of a model config")
    p.add_argument("--config", default="tiny", help="model config name under config/model or a YAML path")
    p.add_argument("--schema", default="fast_ddrive")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.checkpoint import build_random

    bundle = build_random(args.config, args.schema)
    counts = bundle.model.param_counts()
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        for k, v in counts.items():
            print(f"{k:<22}{v:>14,d}  ({v / 1e6:.2f} M)")
        print(f"prompt tokens {bundle.config.prompt_len}, output tokens {bundle.config.output_len}")
    return 0
