"""`ddrive train --config FILE`: build samples (synthetic world or bags), train, write the checkpoint."""
from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

import yaml

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("train", help="train a model (dual-stream loss, block-size curriculum); torchrun for multi-process")
    p.add_argument("--config", required=True, help="training YAML (see config/train/)")
    p.add_argument("--out", default=None, help="override the checkpoint folder")
    p.add_argument("--steps", type=int, default=None, help="override the number of steps")
    p.add_argument("--no-resume", action="store_true", help="start fresh even if train_state exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.scaffold.codec import Codec
    from ddrive_ros.scaffold.layout import Layout
    from ddrive_ros.training.dataset import tensorize
    from ddrive_ros.training.sources import load_samples
    from ddrive_ros.training.trainer import TrainConfig, plot_losses, train

    raw = yaml.safe_load(Path(args.config).read_text())
    cfg = TrainConfig.from_dict(raw)
    if args.out:
        cfg.out = args.out
    if args.steps:
        cfg.steps = args.steps
    bundle = ckpt.build_random(cfg.model, cfg.schema, block_size=int(cfg.curriculum[-1][0]), seed=cfg.seed,
                                action_after_prompt=cfg.action_after_prompt)
    if cfg.init and cfg.transfer:
        raise ValueError("init and transfer are exclusive: init starts from a checkpoint of this schema, "
                         "transfer from another schema's")
    if cfg.init:  # fine-tune: same architecture and schema, weights from an existing checkpoint
        start = ckpt.load(cfg.init)
        if start.schema.name != cfg.schema or start.config.to_dict()["backbone"] != bundle.config.to_dict()["backbone"]:
            raise ValueError(f"init checkpoint {cfg.init} does not match model {cfg.model} / schema {cfg.schema}")
        if cfg.action_after_prompt and start.config.action_rope_shift != bundle.config.action_rope_shift:
            raise ValueError(f"action_after_prompt: init checkpoint {cfg.init} has action_rope_shift "
                             f"{start.config.action_rope_shift}, not {bundle.config.action_rope_shift}")
        set_action_rope_shift(bundle, start.config.action_rope_shift)  # its weights were trained with it
        bundle.model.load_state_dict(start.model.state_dict())
        set_ego_accel(bundle, start.config.ego_accel)
    if cfg.transfer:  # another schema's checkpoint: the weights that fit, shared tokens by their string
        from ddrive_ros.training.transfer import transfer_weights

        report = transfer_weights(bundle, ckpt.load(cfg.transfer))
        print(f"transfer from {cfg.transfer}: {report.summary()}")
    if cfg.ego_accel is not None:
        set_ego_accel(bundle, cfg.ego_accel)
    codec = Codec(Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size))
    samples = load_samples(cfg.data)
    if not samples:
        raise ValueError("no training samples")
    data = tensorize(samples, codec, bundle.config)
    log.info("%d training samples", len(data))
    if cfg.self_targets > 0:  # the starting weights' own greedy plans (training/self_targets.py)
        if not cfg.init:
            raise ValueError("self_targets needs `init`: the targets are a trained model's own greedy plans")
        from ddrive_ros.training.self_targets import greedy_ids

        if cfg.threads:  # before training sets them: two runs side by side must not each take every core
            import torch

            torch.set_num_threads(cfg.threads)
        block = int(cfg.curriculum[-1][0])
        if any(int(bs) != block for bs, _ in cfg.curriculum):
            raise ValueError(f"self_targets needs one block size in the curriculum, got {cfg.curriculum}")
        data.self_ids = greedy_ids(bundle, data, block)
    bundle, history = train(cfg, data, bundle, resume=not args.no_resume)
    out = Path(cfg.out)
    meta = {"command": "ddrive train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else "",
            "train_config": raw, "samples": len(data), "final_loss": history[-1]["loss"] if history else None}
    bundle.meta = {"seed": cfg.seed}  # trained, no longer the random initialisation
    ckpt.save(bundle, out, meta)
    plot_losses(history, out / "loss.png")
    (out / "history.json").write_text(json.dumps(history))
    print(f"wrote {out} ({len(data)} samples, final loss {meta['final_loss']:.3f})")
    return 0


def set_action_rope_shift(bundle, shift: int) -> None:
    """Where the model's trajectory sits in rotary positions (ModelConfig.action_rope_shift): its config and the
    backbone that applies it."""
    import dataclasses

    bundle.config = dataclasses.replace(bundle.config, action_rope_shift=int(shift))
    bundle.model.cfg = bundle.config
    bundle.model.backbone.action_rope_shift = int(shift)


def set_ego_accel(bundle, on: bool) -> None:
    """Whether the model reads the ego's acceleration: its config, saved with the checkpoint, says so for
    training (the dataset's features) and planning alike."""
    import dataclasses

    bundle.config = dataclasses.replace(bundle.config, ego_accel=bool(on))
    bundle.model.cfg = bundle.config
