#!/usr/bin/env python3
"""Tree verification and the ego-state draft for trajectory_only: forwards against rows, measured in one run.

Two tables.

1. Plans (needs the synthetic world: the repo's venv). Cold plans of the shipped trajectory_only model on
   synthetic-world samples (seed 10_000 + --seed: never a training or evaluation seed), on torch eager:
   AR, speculative with the diffusion draft, speculative with the ego-state draft (kinematic_draft.py),
   and the ego-state draft with 4..64 candidate rows per verification (decoding/tree.py; 64 two levels deep). Per row:
   forwards per plan and how many times fewer than AR, rows per plan (what a CPU pays for), p50 ms per
   plan and its ratio to plain speculative, and the plans' token mismatches against AR (must be 0).
   Plans run round-robin over the decoders so that load from other processes spreads over all alike.

2. Row cost (no world: runs on a bare CUDA machine too, `--rows-only --device cuda`). One causal step
   over the trajectory block on a cache forked into K rows, K = 1..64, milliseconds per step and the
   ratio to one row: where the tree's extra rows are nearly free and where they are not.

    .venv/bin/python bench/tree_verification.py --plans 40 --iters 30 --json bench/results/tree_verification_cpu.json
    .venv/bin/python bench/tree_verification.py --replot bench/results/tree_verification_cpu.json --plot docs/tree_verification.png
    python3 bench/tree_verification.py --rows-only --device cuda --json bench/results/tree_rows_h200.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROWS = (1, 2, 4, 8, 16, 32, 64)
TREES = ((4, 1), (8, 1), (16, 1), (32, 1), (64, 2))  # (rows, depth)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _row_model(checkpoint: str, config: str | None, device: torch.device):
    """(model, schema, tokenizer, dtype): the checkpoint's trained weights, or with `config` random weights of that
    model config on trajectory_only (latency depends on shapes, not values), made on the device in bf16 on a GPU."""
    from ddrive_ros import checkpoint as ckpt

    if config is None:
        bundle = ckpt.load(checkpoint, device=str(device))
        return bundle.model, bundle.schema, bundle.tokenizer, torch.float32
    from ddrive_ros.model.config import ModelConfig
    from ddrive_ros.model.vla import DrivingVLA
    from ddrive_ros.scaffold.layout import Layout
    from ddrive_ros.scaffold.schema import Schema
    from ddrive_ros.scaffold.tokenizer import Tokenizer

    schema = Schema.load("trajectory_only")
    tok = Tokenizer.build(schema)
    layout = Layout(schema, tok, schema.default_block_size)
    cfg = ModelConfig.load(config).with_output(len(tok), layout.length, schema.default_block_size)
    torch.manual_seed(0)
    with torch.device(device):  # a 0.8B init on the CPU alone takes tens of seconds
        model = DrivingVLA(cfg)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return model.to(dtype).eval(), schema, tok, dtype


def row_cost(checkpoint: str, device: torch.device, iters: int, config: str | None = None,
             backend_kind: str = "eager") -> list[dict[str, Any]]:
    """ms per causal step over the trajectory block with K rows (prefix = prompt, forked). backend_kind:
    eager (TorchBackend) or cuda_graph (one captured graph per row count; its static-buffer path on the CPU)."""
    from ddrive_ros.runtime.cuda_graph_backend import CudaGraphBackend
    from ddrive_ros.runtime.torch_backend import TorchBackend
    from ddrive_ros.scaffold.layout import Layout

    model, schema, tok, dtype = _row_model(checkpoint, config, device)
    layout = Layout(schema, tok, model.cfg.block_size)
    block = layout.blocks[-1]
    if backend_kind == "eager":
        backend = TorchBackend(model, layout.window, max_rows=max(ROWS), device=device, dtype=dtype)
    elif backend_kind == "cuda_graph":
        backend = CudaGraphBackend(model, layout.window, max(ROWS), device, dtype, graphs=device.type == "cuda")
    else:
        raise ValueError(f"--backends: unknown backend {backend_kind!r} (eager, cuda_graph)")
    h, w = model.cfg.vision.image_size
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8)
    n_ego = model.ego.mlp[0].in_features
    prompt = backend.prompt(images.to(device), torch.zeros(1, n_ego, device=device, dtype=dtype),
                            torch.tensor([tok.bos_id], device=device),
                            torch.tensor([tok.id("<nav:FOLLOW_LANE>")], device=device))
    backend.prefill(prompt)
    start = backend.prompt_len + block.start
    ids = torch.as_tensor(layout.template_ids[block.start:block.end], device=device)
    out = []
    with torch.inference_mode():
        for k in ROWS:
            x = torch.nn.functional.pad(ids, (0, layout.window - ids.shape[0]))[None].expand(k, -1).contiguous()
            backend.fork(k, start)
            for _ in range(3):
                backend.step(x, start, block.length, False, True)
            _sync(device)
            t = time.perf_counter()
            for _ in range(iters):
                backend.step(x, start, block.length, False, True)
            _sync(device)
            out.append({"rows": k, "ms_per_step": (time.perf_counter() - t) / iters * 1e3})
    for r in out:
        r["x_one_row"] = r["ms_per_step"] / out[0]["ms_per_step"]
    return out


def plans(checkpoint: str, n: int, seed: int) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.evaluation.evaluate import held_out_samples
    from ddrive_ros.planner import Planner, PlannerOptions

    bundle = ckpt.load(checkpoint)
    samples = held_out_samples(10_000 + seed, n, 1)
    runs = {"ar": PlannerOptions(decoder="ar", draft_kinematic=False),
            "speculative, diffusion draft": PlannerOptions(draft_kinematic=False),
            "speculative, ego-state draft": PlannerOptions()}
    runs.update({f"ego-state draft, tree={k}" + ("x2" if depth == 2 else ""): PlannerOptions(knobs={"tree": k, "tree_depth": depth})
                 for k, depth in TREES})
    planners = {name: Planner(bundle, o) for name, o in runs.items()}
    rec: dict[str, dict[str, list]] = {name: {"fwd": [], "rows": [], "ms": [], "mismatch": []} for name in runs}
    for p in planners.values():
        p.plan(samples[0].observation)  # warm-up
    for s in tqdm(samples, desc="plans (round-robin over decoders)"):
        ids = {}
        for name, p in planners.items():
            p.restart_sampling()  # cold: no previous plan
            t = time.perf_counter()
            plan, out = p.plan_and_ids(s.observation)
            ms = (time.perf_counter() - t) * 1e3
            ids[name] = out[0]
            st = plan.stats
            r = rec[name]
            r["fwd"].append(st.forwards)
            r["rows"].append(st.forwards - st.tree_forwards + st.tree_rows)
            r["ms"].append(ms)
        ar_ids = ids["ar"]
        for name in runs:  # AR runs on one-token blocks over the same template positions
            if ids[name].shape != ar_ids.shape:
                raise ValueError(f"{name}: {ids[name].shape} output ids against AR's {ar_ids.shape}")
            rec[name]["mismatch"].append(int(np.sum(ids[name] != ar_ids)))
    base_fwd = float(np.mean(rec["ar"]["fwd"]))
    base_ms = float(np.median(rec["speculative, diffusion draft"]["ms"]))
    rows = []
    for name, r in rec.items():
        rows.append({"decoder": name, "forwards_per_plan": float(np.mean(r["fwd"])),
                     "x_fewer_than_ar": base_fwd / float(np.mean(r["fwd"])), "rows_per_plan": float(np.mean(r["rows"])),
                     "ms_p50": float(np.median(r["ms"])), "ms_x_speculative": float(np.median(r["ms"])) / base_ms,
                     "token_mismatches_vs_ar": int(np.sum(r["mismatch"]))})
    return rows


def estimate(plans_json: str, rows_json: str) -> list[dict[str, Any]]:
    """ms of backbone steps per plan on another device: a saved plans table (forwards and rows per plan, measured
    on the CPU with the same tokens) priced by a saved row-cost table (ms per causal step with K rows, per backend).
    A tree plan's F forwards hold t = (R - F) / (K - 1) K-row verifications and F - t one-row forwards."""
    plans_ = json.loads(Path(plans_json).read_text())["plans"]
    rows_res = json.loads(Path(rows_json).read_text())
    by_backend = rows_res.get("row_cost_by_backend") or {"eager": rows_res["row_cost"]}
    out = []
    for backend, rc in by_backend.items():
        cost = {r["rows"]: r["ms_per_step"] for r in rc}
        one = cost[1]
        base = None
        for p in plans_:
            name, f, r = p["decoder"], p["forwards_per_plan"], p["rows_per_plan"]
            k = int(name.split("tree=")[1].split("x")[0]) if "tree=" in name else 1
            if k not in cost:
                raise ValueError(f"{rows_json}: no row cost for {k} rows ({name})")
            t = (r - f) / (k - 1) if k > 1 else 0.0
            ms = (f - t) * one + t * cost[k]
            if name.startswith("speculative, ego-state"):
                base = ms
            out.append({"backend": backend, "decoder": name, "forwards_per_plan": f, "rows_per_plan": r,
                        "k_row_forwards": t, "step_ms_per_plan": ms})
        for row in out:
            if row["backend"] == backend and base:
                row["x_plain_speculative"] = row["step_ms_per_plan"] / base
    return out


def plot(res: dict[str, Any], path: str) -> None:
    """Forwards per plan against CPU time per plan (left) and the per-row step cost (right)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    if res.get("plans"):
        rows = res["plans"]
        ar = next(r for r in rows if r["decoder"] == "ar")["forwards_per_plan"]
        for r in rows:
            a.scatter(r["ms_p50"], r["forwards_per_plan"], s=40)
            a.annotate(r["decoder"].replace("ego-state draft, ", "").replace("speculative, ", "spec, "),
                       (r["ms_p50"], r["forwards_per_plan"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        a.axhline(ar / 3, ls="--", c="grey", lw=1)
        a.set_xscale("log")
        a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        a.text(a.get_xlim()[0] * 1.05, ar / 3 - 0.15, "AR's forwards / 3 (the issue's bar)", va="top", fontsize=8, color="grey")
        a.set_xlabel("ms per cold plan, p50 (CPU, 1 thread, log)")
        a.set_ylabel("backbone forwards per plan")
        a.set_title("same plan as AR in every row: forwards vs CPU time")
    rc = res["row_cost"]
    b.plot([r["rows"] for r in rc], [r["ms_per_step"] for r in rc], "o-", label=res["device"])
    b.plot([r["rows"] for r in rc], [rc[0]["ms_per_step"] * r["rows"] for r in rc], ":", c="grey", label="linear in rows")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("rows in one causal step (trajectory block)")
    b.set_ylabel("ms per step")
    b.set_title("what a candidate row costs")
    b.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="trajectory_only_tiny")
    p.add_argument("--plans", type=int, default=60, help="samples (one per episode)")
    p.add_argument("--seed", type=int, default=0, help="episode seed offset (episodes from seed 10_000 + this)")
    p.add_argument("--rows-only", action="store_true", help="only the row-cost table (no synthetic world needed)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--config", default=None, help="row cost of a random-weight model of this config (e.g. base-0.8b, "
                   "bf16 on a GPU) on trajectory_only instead of --checkpoint's weights; needs --rows-only")
    p.add_argument("--backends", default="eager", help="row-cost backends, comma-separated: eager, cuda_graph")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--iters", type=int, default=50, help="timed steps per row count")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None, metavar="PNG", help="also draw forwards against time and the row cost")
    p.add_argument("--replot", default=None, metavar="JSON", help="measure nothing: draw --plot from a saved run")
    p.add_argument("--estimate", nargs=2, default=None, metavar=("PLANS_JSON", "ROWS_JSON"),
                   help="measure nothing: price a saved plans table (forwards, rows) by a saved row-cost table "
                        "(e.g. a GPU's) into backbone-step ms per plan")
    args = p.parse_args(argv)
    if args.estimate:
        est = estimate(*args.estimate)
        print(f"Backbone-step ms per plan: plans of {args.estimate[0]} priced by the row cost of {args.estimate[1]}")
        print(table(est, ["backend", "decoder", "forwards_per_plan", "k_row_forwards", "step_ms_per_plan",
                          "x_plain_speculative"]))
        if args.json:
            Path(args.json).write_text(json.dumps({"plans_from": args.estimate[0], "rows_from": args.estimate[1],
                                                   "estimate": est}, indent=1))
            print(f"wrote {args.json}")
        return 0
    if args.replot:
        if not args.plot:
            raise SystemExit("--replot needs --plot PNG")
        plot(json.loads(Path(args.replot).read_text()), args.plot)
        return 0
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    res: dict[str, Any] = {"checkpoint": args.checkpoint, "device": str(device), "threads": args.threads,
                           "machine": platform.processor() or platform.machine(),
                           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    if args.config:
        res["config"] = args.config
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    what = f"random-weight {args.config}" if args.config else args.checkpoint
    for kind in kinds:
        rc = row_cost(args.checkpoint, device, args.iters, args.config, kind)
        res.setdefault("row_cost_by_backend", {})[kind] = rc
        print(f"Row cost: one causal step over the trajectory block, {what}, {kind}, {device}, {args.threads} thread(s)")
        print(table(rc, ["rows", "ms_per_step", "x_one_row"]))
    res["row_cost"] = res["row_cost_by_backend"][kinds[0]]
    if args.config and not args.rows_only:
        raise SystemExit("--config measures random weights: it needs --rows-only")
    if not args.rows_only:
        if device.type != "cpu":
            raise SystemExit("the plans table runs the CPU planner; use --rows-only on a GPU")
        res["plans"] = plans(args.checkpoint, args.plans, args.seed)
        print(f"\nCold plans, {args.plans} synthetic-world samples (seed {10_000 + args.seed}), torch eager")
        print(table(res["plans"], ["decoder", "forwards_per_plan", "x_fewer_than_ar", "rows_per_plan", "ms_p50",
                                   "ms_x_speculative", "token_mismatches_vs_ar"]))
    if args.plot:
        plot(res, args.plot)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
