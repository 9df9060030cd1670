"""`ddrive export`: the checkpoint's three ONNX graph kinds (vision/prompt, prefill, block step) with static shapes."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("export", help="export ONNX graphs (vision, prefill, block step) for ONNX Runtime / TensorRT")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder or shipped model name")
    p.add_argument("--out", required=True, help="output folder (ONNX files + manifest.json)")
    p.add_argument("--rollouts", type=int, default=1, help="also export step graphs for this many rows")
    p.add_argument("--opset", type=int, default=17)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.runtime.onnx_export import export_checkpoint
    from ddrive_ros.scaffold.layout import Layout

    bundle = ckpt.load(args.checkpoint)
    # the AR baseline's block-size-1 window and the checkpoint's own block window
    windows = sorted({Layout(bundle.schema, bundle.tokenizer, bs).window for bs in (1, bundle.config.block_size)})
    rows = sorted({1, max(1, args.rollouts)})
    manifest = export_checkpoint(bundle.model, windows, args.out, rows=rows, opset=args.opset)
    for name, info in manifest.get("graphs", {}).items():
        print(f"{name:<24} {info.get('file', '')}")
    print(f"wrote {args.out} (opset {manifest.get('opset')}, IR {manifest.get('ir_version')})")
    return 0
