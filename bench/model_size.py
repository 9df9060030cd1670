#!/usr/bin/env python3
"""Model size against cost on this CPU: what a plan and a training step cost from tiny upwards.

Issue 12 asks whether a `small` config between `tiny` and `base-0.8b` pays for itself within the node's CPU
rate target. This script answers the cost half, in one run, for each config given (default: tiny, small and
small at 1.5x and 2x width, which draw the curve between the two named configs and the 0.8B model):

- parameters;
- ms per vision encode (six images), prefill and block step (draft and verify), on torch eager and ONNX
  Runtime (fp32), for both schemas the models ship with (fast_ddrive_bins: the full plan; trajectory_only);
- ms per plan: a speculative plan measured with random weights (latency depends on shapes, not values),
  its decode time scaled to the forward count of the shipped tiny model (`--forwards`; random weights accept
  few drafts), beside the targets: the full plan <= 80 ms and trajectory_only <= 15 ms (issue 14's CPU
  bars), and the node's periods (5 Hz full plan, 10 Hz trajectory_only);
- ms per training step (batch 8, forward + backward + AdamW, both streams of the dual loss) and the steps
  that fit in the 90 minutes of 2-core training the issue allows a shipped model.

What it does not answer is quality: whether a larger model trained for those steps plans better. That
needs the model trained (docs/training.md, "A small model").

    .venv/bin/python bench/model_size.py --threads 1 --json bench/results/model_size.json --plot docs/model_size.png

Default forward counts (cold plans of the shipped models on seed 777 / their `ddrive bench decoding` run):
fast_ddrive_bins 37.2 (`bench/results/decoding_cpu_bins_1.json`), trajectory_only 8.05
(`bench/results/eval_trajectory_only_tiny_200_tree.json`).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from gpu_bench import Case, Clock, forward_latency, plan_latency  # noqa: E402

from ddrive_ros.model.config import ModelConfig  # noqa: E402
from ddrive_ros.runtime.factory import make_backend  # noqa: E402
from ddrive_ros.training.dataset import batch_prompts  # noqa: E402
from ddrive_ros.training.losses import DualStreamLoss  # noqa: E402

log = logging.getLogger("model_size")

SCHEMAS = ("fast_ddrive_bins", "trajectory_only")
FORWARDS = "fast_ddrive_bins=37.2,trajectory_only=8.05"
TARGET_MS = {"fast_ddrive_bins": 80.0, "trajectory_only": 15.0}  # issue 14's CPU bars (p50 per plan)
NODE_HZ = {"fast_ddrive_bins": 5.0, "trajectory_only": 10.0}  # config/planner.yaml and the launch files
TRAIN_BUDGET_S = 90 * 60  # issue 12: up to about 90 minutes of 2-core training per shipped model
BACKENDS = ("torch", "onnx")


def widened(base: dict[str, Any], factor: float, name: str) -> dict[str, Any]:
    """`base` with every width (vision and backbone dims, MLP and FFN sizes) times `factor`, rounded so that
    head dimensions stay even (RoPE) and divisible by the heads."""
    d = json.loads(json.dumps(base))
    v, b = d["vision"], d["backbone"]
    step_v, step_b = 2 * v["heads"], 2 * b["heads"]
    v["dim"] = int(round(v["dim"] * factor / step_v) * step_v)
    v["mlp"] = int(round(v["mlp"] * factor / 16) * 16)
    b["dim"] = int(round(b["dim"] * factor / step_b) * step_b)
    b["ffn_hidden"] = int(round(b["ffn_hidden"] * factor / 16) * 16)
    b["action_ffn_hidden"] = int(round(b["action_ffn_hidden"] * factor / 16) * 16)
    d["name"] = name
    return d


def config_paths(spec: str, tmp: Path) -> list[tuple[str, Path]]:
    """NAME (config/model), a YAML path, or NAME*F (that config widened F times), comma-separated."""
    out = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        name, _, factor = item.partition("*")
        is_path = name.endswith((".yaml", ".yml"))
        path = Path(name) if is_path else REPO / "config" / "model" / f"{name}.yaml"
        if not path.is_file():
            raise SystemExit(f"--configs: {item!r}: no model config at {path}")
        if factor:
            try:
                f = float(factor)
            except ValueError:
                raise SystemExit(f"--configs: {item!r}: the width factor after '*' must be a number") from None
            d = widened(yaml.safe_load(path.read_text()), f, f"{path.stem}x{f:g}")
            path = tmp / f"{d['name']}.yaml"
            path.write_text(yaml.safe_dump(d))
            name = d["name"]
        out.append((Path(name).stem if is_path and not factor else name, path))
    return out


def parse_forwards(spec: str) -> dict[str, float]:
    out = {}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        schema, _, value = item.partition("=")
        if schema not in SCHEMAS:
            raise SystemExit(f"--forwards: unknown schema {schema!r} (one of {', '.join(SCHEMAS)})")
        try:
            out[schema] = float(value)
        except ValueError:
            raise SystemExit(f"--forwards: {item!r}: expected SCHEMA=COUNT") from None
    missing = set(SCHEMAS) - set(out)
    if missing:
        raise SystemExit(f"--forwards: no count for {sorted(missing)}")
    return out


def prompt_ms(backend, case: Case, clock: Clock, iters: int) -> float:
    """ms per prompt from six images the backend has not seen (ONNX Runtime keeps vision tokens per image, so
    the same images again would time a cache hit): what a cold plan pays before its prefill."""
    gen = torch.Generator().manual_seed(7)
    sets = iter([torch.randint(0, 256, tuple(case.images.shape), dtype=torch.uint8, generator=gen)
                 for _ in range(iters + 2)])
    return clock.per_call(lambda: backend.prompt(next(sets), case.ego, case.bos, case.nav), iters, warmup=2)


def train_step_ms(case: Case, iters: int) -> float:
    """ms per supervised step: batch 8 of the schema's expert-shaped ids (every editable position labelled),
    the vision encoder included, backward and AdamW."""
    model = case.model.train()
    layout = case.main
    loss = DualStreamLoss(layout, model.cfg.prompt_len)
    batch = 8
    ids = torch.as_tensor(layout.template_ids, dtype=torch.long).repeat(batch, 1)
    editable = torch.as_tensor(layout.editable, dtype=torch.bool)
    allowed = torch.as_tensor(layout.allowed, dtype=torch.bool)
    first_allowed = allowed.float().argmax(dim=1)
    ids[:, editable] = first_allowed[editable]
    labelled = editable.repeat(batch, 1)
    images = case.images.repeat(batch, 1, 1, 1, 1)
    ego = case.ego.repeat(batch, 1)
    nav = case.nav.repeat(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        prompt = batch_prompts(model, images, ego, nav, case.tokenizer.bos_id)
        parts = loss(model, prompt, ids, labelled, gen)
        opt.zero_grad(set_to_none=True)
        parts.total.backward()
        opt.step()

    ms = Clock(torch.device("cpu")).per_call(step, iters, warmup=1)
    model.eval()
    return ms


def measure(name: str, path: Path, args: argparse.Namespace, forwards: dict[str, float], export_root: Path,
            bar: tqdm) -> dict[str, Any]:
    clock = Clock(torch.device("cpu"))
    row: dict[str, Any] = {"config": name, "path": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else name}
    for schema in SCHEMAS:
        torch.set_num_threads(args.threads)
        case = Case(schema, str(path), torch.device("cpu"), torch.float32)
        row["params_m"] = sum(p.numel() for p in case.model.parameters()) / 1e6  # the full plan's (larger vocab)
        out: dict[str, Any] = {"params_m": sum(p.numel() for p in case.model.parameters()) / 1e6}
        for kind in BACKENDS:
            bar.set_postfix_str(f"{name} {schema} {kind}")
            opts = {"onnx_dir": str(export_root / f"{name}_{schema}"), "threads": args.threads} if kind == "onnx" else {}
            backend = make_backend(kind, case.model, case.main.window, 1, "cpu", torch.float32, **opts)
            lat = forward_latency(backend, case, clock, args.iters)
            lat["vision_ms"] = prompt_ms(backend, case, clock, args.iters)  # forward_latency's repeats one image set
            plan = plan_latency(backend, case.main, case, "speculative", {}, args.plans, clock)
            steps_ms = max(plan["decode_ms"] - lat["prefill_ms"], 0.0)  # the block forwards and the loop around them
            estimate = lat["vision_ms"] + lat["prefill_ms"] + steps_ms * forwards[schema] / plan["forwards"]
            out[kind] = {**{k: round(v, 3) for k, v in lat.items()},
                         "random_weights_forwards": plan["forwards"],
                         "random_weights_plan_ms": round(plan["ms_per_plan"], 2),
                         "plan_ms_at_shipped_forwards": round(estimate, 2)}
            bar.update(1)
        torch.set_num_threads(args.train_threads)
        bar.set_postfix_str(f"{name} {schema} training step")
        step_ms = round(train_step_ms(case, args.train_iters), 1)
        out["train_step_ms"] = step_ms
        out["train_steps_in_90_min"] = int(TRAIN_BUDGET_S / (step_ms / 1e3))  # from the value the JSON records
        bar.update(1)
        row[schema] = out
        del case
    return row


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# Plan and training-step cost by model size ({res['machine']['threads']} inference thread(s), "
             f"{res['machine']['train_threads']} training threads, {res['machine']['cpu_count']} CPUs)", ""]
    tiny = {s: res["rows"][0][s] for s in SCHEMAS}
    for schema in SCHEMAS:
        target, hz = TARGET_MS[schema], NODE_HZ[schema]
        lines += [f"## {schema} (speculative at {res['forwards'][schema]:g} forwards per plan; target {target:g} ms, "
                  f"node period {1000 / hz:g} ms)", "",
                  "| config | params (M) | x tiny | vision ms | prefill ms | step ms (draft / verify) | "
                  "plan ms torch | plan ms ORT | x tiny (ORT) | fits target | fits node period | "
                  "train step ms | steps in 90 min |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in res["rows"]:
            r, t = row[schema], tiny[schema]
            ort, pt = r["onnx"], r["torch"]
            best = min(ort["plan_ms_at_shipped_forwards"], pt["plan_ms_at_shipped_forwards"])
            lines.append(
                f"| {row['config']} | {r['params_m']:.2f} | {r['params_m'] / t['params_m']:.1f} | "
                f"{ort['vision_ms']:.1f} | {ort['prefill_ms']:.2f} | {ort['step_draft_ms']:.2f} / "
                f"{ort['step_verify_ms']:.2f} | {pt['plan_ms_at_shipped_forwards']:.1f} | "
                f"{ort['plan_ms_at_shipped_forwards']:.1f} | "
                f"{ort['plan_ms_at_shipped_forwards'] / t['onnx']['plan_ms_at_shipped_forwards']:.2f} | "
                f"{'yes' if best <= target else 'no'} | {'yes' if best <= 1000 / hz else 'no'} | "
                f"{r['train_step_ms']:.0f} | {r['train_steps_in_90_min']} |")
        lines.append("")
    lines.append(f"total {res['seconds']:.0f} s")
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used as matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, schema in zip(axes, SCHEMAS):
        params = [r[schema]["params_m"] for r in res["rows"]]
        for kind, label, style in (("torch", "torch eager", "o-"), ("onnx", "ONNX Runtime fp32", "s-")):
            ax.plot(params, [r[schema][kind]["plan_ms_at_shipped_forwards"] for r in res["rows"]], style, label=label)
        for r, p in zip(res["rows"], params):
            ax.annotate(r["config"], (p, r[schema]["onnx"]["plan_ms_at_shipped_forwards"]), textcoords="offset points",
                        xytext=(4, -12), fontsize=8)
        ax.axhline(TARGET_MS[schema], color="tab:red", ls="--", label=f"target {TARGET_MS[schema]:g} ms")
        ax.axhline(1000 / NODE_HZ[schema], color="tab:gray", ls=":", label=f"node period ({NODE_HZ[schema]:g} Hz)")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(params))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:.1f}"))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("parameters (M)")
        ax.set_ylabel("ms per plan (1 thread)" if res["machine"]["threads"] == 1 else "ms per plan")
        ax.set_title(f"{schema}: speculative, {res['forwards'][schema]:g} forwards")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("What a plan costs on this CPU as the model grows (bench/model_size.py)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="tiny,small,small*1.5,small*2",
                   help="NAME (config/model/NAME.yaml), a YAML path, or NAME*F (widened F times); the first is the "
                        "reference the ratios use")
    p.add_argument("--threads", type=int, default=1, help="inference threads (torch and ONNX Runtime)")
    p.add_argument("--train-threads", type=int, default=2, help="threads for the training step")
    p.add_argument("--iters", type=int, default=10, help="timed calls per forward")
    p.add_argument("--plans", type=int, default=5, help="timed plans per point (median)")
    p.add_argument("--train-iters", type=int, default=3, help="timed training steps per point")
    p.add_argument("--forwards", default=FORWARDS, help="SCHEMA=COUNT,...: the shipped models' forwards per plan")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--plot", default=None, help="write a PNG of ms per plan against parameters here")
    p.add_argument("--from-json", default=None, help="print and plot an earlier run's JSON instead of measuring")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        sys.stdout.write(markdown(res) + "\n")
        if args.plot:
            plot(res, Path(args.plot))
        return 0
    forwards = parse_forwards(args.forwards)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        configs = config_paths(args.configs, Path(tmp))
        bar = tqdm(total=len(configs) * len(SCHEMAS) * (len(BACKENDS) + 1), desc="model sizes", unit="point")
        rows = [measure(name, path, args, forwards, Path(tmp) / "onnx", bar) for name, path in configs]
        bar.close()
    res = {"rows": rows, "forwards": forwards, "targets_ms": TARGET_MS, "node_hz": NODE_HZ,
           "machine": {"cpu_count": os.cpu_count(), "threads": args.threads, "train_threads": args.train_threads,
                       "platform": platform.platform(), "torch": torch.__version__,
                       "load_average": os.getloadavg()},
           "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
           "seconds": time.perf_counter() - t0}
    sys.stdout.write(markdown(res) + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2))
        log.info("wrote %s", args.json)
    if args.plot:
        plot(res, Path(args.plot))
        log.info("wrote %s", args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
