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


def row_cost(checkpoint: str, device: torch.device, iters: int) -> list[dict[str, Any]]:
    """ms per causal step over the trajectory block with K rows (prefix = prompt, forked)."""
    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.runtime.torch_backend import TorchBackend
    from ddrive_ros.scaffold.layout import Layout

    bundle = ckpt.load(checkpoint, device=str(device))
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    block = layout.blocks[-1]
    backend = TorchBackend(bundle.model, layout.window, max_rows=max(ROWS), device=device)
    h, w = bundle.config.vision.image_size
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8)
    tok = bundle.tokenizer
    prompt = backend.prompt(images.to(device), torch.zeros(1, 11, device=device), torch.tensor([tok.bos_id], device=device),
                            torch.tensor([tok.id("<nav:FOLLOW_LANE>")], device=device))
    backend.prefill(prompt)
    start = backend.prompt_len + block.start
    ids = torch.as_tensor(layout.template_ids[block.start:block.end], device=device)
    out = []
    for k in ROWS:
        x = ids[None].expand(k, -1).contiguous()
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
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--iters", type=int, default=50, help="timed steps per row count")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None, metavar="PNG", help="also draw forwards against time and the row cost")
    p.add_argument("--replot", default=None, metavar="JSON", help="measure nothing: draw --plot from a saved run")
    args = p.parse_args(argv)
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
    res["row_cost"] = row_cost(args.checkpoint, device, args.iters)
    print(f"Row cost: one causal step over the trajectory block, {device}, {args.threads} thread(s)")
    print(table(res["row_cost"], ["rows", "ms_per_step", "x_one_row"]))
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
