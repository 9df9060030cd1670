"""`ddrive rl --config FILE`: RL fine-tuning of a trained model on the closed-loop score (GRPO-style,
`training/grpo.py`); writes the checkpoint, `rl_history.json` and the reward curve `rl_reward.png`."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

import yaml


def register(sub) -> None:
    p = sub.add_parser("rl", help="RL fine-tuning on the closed-loop PDM score (GRPO over shared-prefix rollouts); "
                                  "torchrun for data parallel")
    p.add_argument("--config", required=True, help="RL YAML (see config/rl/)")
    p.add_argument("--out", default=None, help="override the checkpoint folder")
    p.add_argument("--iterations", type=int, default=None, help="override the number of iterations")
    p.add_argument("--episodes", type=int, default=None, help="override the episodes collected per iteration")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.training.grpo import RLConfig, train_rl

    raw = yaml.safe_load(Path(args.config).read_text())
    cfg = RLConfig.from_dict(raw)
    for key in ("out", "iterations", "episodes"):
        if getattr(args, key) is not None:
            setattr(cfg, key, getattr(args, key))
    bundle, history = train_rl(cfg)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun rank 0 writes the model
        return 0
    meta = {"command": "ddrive rl " + " ".join(shlex.quote(a) for a in sys.argv[2:]), "rl_config": raw,
            "rl_iterations": len(history)}
    ckpt.save(bundle, cfg.out, meta)
    last = history[-1]
    print(f"wrote {cfg.out}: {len(history)} iterations, last rollout reward {last['reward_mean']:.3f}, "
          f"driven PDMS {last['driven_pdms']:.3f}")
    return 0
