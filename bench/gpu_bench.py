#!/usr/bin/env python3
"""GPU runtime benchmark: eager vs CUDA graphs (and TensorRT when installed) for a 0.8B model.

What it measures, on one GPU, in under five minutes:
- device-to-device copy bandwidth (GB/s), the memory roofline every floor below uses;
- ms per vision encode, per prefill and per block-step forward (main window, rows 1),
  each beside its physical floor: the weight bytes that forward must read / bandwidth;
- ms per plan for AR, section diffusion with 4 fixed steps per block, and scaffold
  speculative decoding, on both schemas, with the forward count of each plan, and a
  model estimate (forwards x ms per forward) that for speculative decoding uses the
  forward count of the shipped tiny model when bench/results/decoding_cpu.json exists
  (random weights accept few drafts, a trained model many);
- peak GPU memory per backend.
Random weights: latency depends on shapes, not values. `--dry-run` runs the same code
on the CPU with the tiny config in float32 (CUDA graphs replaced by their static-buffer
path), so this script is tested where there is no GPU.

Imports only ddrive_ros model/runtime/decoding/scaffold code, torch, numpy and yaml: the
GPU machine has no ROS, no OpenCV and no tqdm.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # gpu.sh sets PYTHONPATH; this keeps `python bench/gpu_bench.py` working too
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ddrive_ros.decoding.block_loop import DecodeOptions, decode  # noqa: E402
from ddrive_ros.decoding.strategies import make_strategy  # noqa: E402
from ddrive_ros.model.config import ModelConfig  # noqa: E402
from ddrive_ros.model.vla import DrivingVLA  # noqa: E402
from ddrive_ros.runtime.cuda_graph_backend import CudaGraphBackend  # noqa: E402
from ddrive_ros.runtime.torch_backend import TorchBackend  # noqa: E402
from ddrive_ros.scaffold.layout import Layout  # noqa: E402
from ddrive_ros.scaffold.schema import Schema  # noqa: E402
from ddrive_ros.scaffold.tokenizer import Tokenizer  # noqa: E402

log = logging.getLogger("gpu_bench")

SCHEMAS = {"fast_ddrive": 32, "fast_ddrive_bins": 32, "trajectory_only": 16}  # schema -> main block size
# the shipped models' forward counts (`ddrive bench decoding`), by schema: fast_ddrive is the digit-coded full plan
FORWARDS_FROM = ("fast_ddrive=bench/results/decoding_cpu.json,fast_ddrive_bins=bench/results/decoding_cpu_bins_1.json,"
                 "trajectory_only=bench/results/decoding_cpu_trajectory_only.json")
DECODERS: list[tuple[str, str, dict[str, Any]]] = [
    ("ar", "ar", {}),
    ("diffusion-4step", "diffusion", {"steps": 4, "tau": 1.01}),  # tau > 1: exactly 4 forwards per block
    ("speculative", "speculative", {}),
]
BACKENDS = ("eager", "cuda_graph", "compiled")
COMPILE_SECONDS_NEEDED = 120  # torch.compile (--compile only): skipped when less time is left (and in dry runs)
TRT_SECONDS_NEEDED = 150  # export + engine builds for a 0.8B model; skipped when less time is left


# ---------------------------------------------------------------------------- timing
class Clock:
    """ms per call: CUDA events on a GPU (launch-accurate), perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def per_call(self, fn: Callable[[], Any], iters: int, warmup: int = 2) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1e3 / iters


def copy_bandwidth(device: torch.device, nbytes: int, clock: Clock) -> float:
    """GB/s of a large device-to-device copy, counting the read and the write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = clock.per_call(lambda: dst.copy_(src), iters=10 if clock.cuda else 3)
    del src, dst
    return 2 * nbytes / (ms / 1e3) / 1e9


def weight_bytes(model: DrivingVLA) -> dict[str, int]:
    """Bytes each forward must read at least: a block step reads every layer once with one FFN and one head."""
    size = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())  # noqa: E731
    bb = model.backbone
    action = sum(size(layer.action_ffn) for layer in bb.layers) + size(bb.action_head)
    step = size(bb) - size(bb.embed) - action
    return {"vision": size(model.vision) + size(model.ego), "backbone_step": step, "total": size(model)}


# ---------------------------------------------------------------------------- model and inputs
class Case:
    """One schema: its layouts, a random-weight model on the device, and one observation's inputs."""

    def __init__(self, schema_name: str, config: str, device: torch.device, dtype: torch.dtype):
        self.name = schema_name
        self.schema = Schema.load(schema_name)
        self.tokenizer = Tokenizer.build(self.schema)
        self.ar = Layout(self.schema, self.tokenizer, 1)
        self.main = Layout(self.schema, self.tokenizer, SCHEMAS[schema_name])
        cfg = ModelConfig.load(config).with_output(len(self.tokenizer), self.main.length, SCHEMAS[schema_name])
        torch.manual_seed(0)
        with torch.device(device):  # initialise on the device: a 0.8B CPU init alone takes tens of seconds
            self.model = DrivingVLA(cfg)
        self.model = self.model.to(dtype).eval()
        gen = torch.Generator().manual_seed(1)
        h, w = cfg.vision.image_size
        self.images = torch.randint(0, 256, (1, 6, h, w, 3), dtype=torch.uint8, generator=gen).to(device)
        self.ego = torch.randn(1, 11, generator=gen).to(device)
        self.bos = torch.tensor([self.tokenizer.bos_id], device=device)
        self.nav = torch.tensor([self.tokenizer.id("<nav:FOLLOW_LANE>")], device=device)

    def inputs(self) -> tuple[torch.Tensor, ...]:
        return self.images, self.ego, self.bos, self.nav


def make(kind: str, case: Case, window: int, device: torch.device, dtype: torch.dtype, graphs: bool, rows: int = 1):
    if kind == "eager":
        return TorchBackend(case.model, window, rows, device, dtype)
    if kind == "compiled":
        return TorchBackend(case.model, window, rows, device, dtype, compile=True)
    return CudaGraphBackend(case.model, window, rows, device, dtype, graphs=graphs)


def sampled_rollouts(kind: str, case: Case, device: torch.device, dtype: torch.dtype, graphs: bool) -> dict[str, Any]:
    """A sampled plan (T=0.7) with 4 sampled rollouts (T=1): the sampling generator must live on the
    device of the logits (a CPU generator made multinomial fail on CUDA tensors)."""
    backend = make(kind, case, case.main.window, device, dtype, graphs, rows=4)
    prompt = backend.prompt(*case.inputs())
    ids, stats = decode(backend, case.main, prompt, make_strategy("speculative"),
                        DecodeOptions(temperature=0.7, rollouts=4, rollout_temperature=1.0, seed=1))
    allowed = torch.as_tensor(case.main.allowed, device=ids.device)
    return {"ok": bool(allowed.gather(1, ids.T).all()), "rows": ids.shape[0], "forwards": stats.forwards}


# ---------------------------------------------------------------------------- measurements
def forward_latency(backend, case: Case, clock: Clock, iters: int) -> dict[str, float]:
    """ms per vision encode, prefill, and block step (draft = bidirectional, verify/commit = causal)."""
    prompt = backend.prompt(*case.inputs())
    out = {"vision_ms": clock.per_call(lambda: backend.prompt(*case.inputs()), iters)}
    out["prefill_ms"] = clock.per_call(lambda: backend.prefill(prompt), iters)
    layout = case.main
    block = layout.blocks[0]
    tokens = torch.full((1, backend.window), layout.tokenizer.pad_id, dtype=torch.long, device=prompt.device)
    tokens[0, : block.length] = torch.as_tensor(layout.template_ids[block.start:block.end])
    start = backend.prompt_len + block.start
    for label, bidirectional in (("step_draft_ms", True), ("step_verify_ms", False)):
        out[label] = clock.per_call(lambda: backend.step(tokens, start, block.length, bidirectional, False), iters)
    return out


def plan_latency(backend, layout: Layout, case: Case, decoder: str, knobs: dict, plans: int,
                 clock: Clock) -> dict[str, Any]:
    """Median ms per plan (vision + prefill + decode) and per stage, after one warm-up plan (which captures graphs)."""
    strategy = make_strategy(decoder, **knobs)
    prompt_ms, decode_ms, ids, stats = [], [], None, None
    for i in range(plans + 1):
        clock.sync()
        t0 = time.perf_counter()
        prompt = backend.prompt(*case.inputs())
        clock.sync()
        t1 = time.perf_counter()
        ids, stats = decode(backend, layout, prompt, strategy, DecodeOptions())
        clock.sync()
        if i > 0:
            prompt_ms.append((t1 - t0) * 1e3)
            decode_ms.append((time.perf_counter() - t1) * 1e3)
    p, d = statistics.median(prompt_ms), statistics.median(decode_ms)
    return {"ms_per_plan": p + d, "prompt_ms": p, "decode_ms": d, "forwards": stats.forwards,
            "tokens_decided": stats.tokens_decided, "ids": ids.cpu()}


def trained_forwards(spec: str) -> dict[str, dict[str, float]]:
    """Forward counts per decoder from `ddrive bench decoding` JSONs of the shipped models, keyed by schema.
    spec: comma-separated SCHEMA=PATH (or a bare PATH, whose schema is read from the file or its source name);
    relative paths are from the repository root. A missing file is skipped (measured counts are used)."""
    out: dict[str, dict[str, float]] = {}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        schema, _, raw = item.rpartition("=")
        path = Path(raw) if Path(raw).is_absolute() else REPO / raw
        if schema and schema not in SCHEMAS:
            raise SystemExit(f"--forwards-from: unknown schema {schema!r} in {item!r} (one of {', '.join(SCHEMAS)})")
        if not path.is_file():
            log.warning("--forwards-from: %s not found; measured forward counts are used", path)
            continue
        try:
            data = json.loads(path.read_text())
            source = str(data.get("source", ""))
            name = schema or data.get("schema") or next((s for s in SCHEMAS if s in source), "fast_ddrive")
            out[name] = {r["decoder"]: float(r["forwards_per_plan"]) for r in data["rows"]}
        except (KeyError, TypeError, ValueError) as err:
            log.warning("could not read forward counts from %s (%s); using measured counts", path, err)
    return out


def tensorrt_latency(case: Case, device: torch.device, dtype: torch.dtype, clock: Clock, iters: int,
                     seconds_left: float) -> dict[str, Any]:
    try:
        import tensorrt
    except ImportError:
        return {"available": False, "note": "tensorrt is not importable on this machine; TensorRT not measured"}
    if device.type != "cuda":
        return {"available": True, "note": "dry run on the CPU: TensorRT not measured"}
    if seconds_left < TRT_SECONDS_NEEDED:
        return {"available": True, "note": f"skipped: {seconds_left:.0f} s left of the time budget"}
    from ddrive_ros.runtime.factory import make_backend

    precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        backend = make_backend("tensorrt", case.model, case.main.window, 1, device, dtype, onnx_dir=tmp,
                               precision=precision)
        build_s = time.perf_counter() - t0
        out = forward_latency(backend, case, clock, iters)
    return {"available": True, "version": tensorrt.__version__, "precision": precision, "export_and_build_s": build_s,
            **out}


# ---------------------------------------------------------------------------- report
def markdown(res: dict[str, Any]) -> str:
    f = lambda x: "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"  # noqa: E731
    lines = [f"# GPU benchmark: {res['model']} ({res['dtype']}) on {res['device']}", "",
             f"copy bandwidth {res['bandwidth_gbs']:.0f} GB/s; torch {res['torch']}; "
             f"TensorRT: {res['tensorrt'].get('version') or res['tensorrt'].get('note')}", ""]
    fw = res["forward"]
    trt = res["tensorrt"]
    lines += [f"## Forward latency, ms ({fw['schema']}, window {fw['window']}, rows 1)", "",
              "| forward | floor (bytes/bandwidth) | eager | compiled | CUDA graphs | TensorRT |", "|---|---|---|---|---|---|"]
    stages = (("vision_ms", "vision encode", "vision"),
              ("prefill_ms", f"prefill (P={fw['prompt_len']})", "backbone_step"),
              ("step_draft_ms", "block step, draft", "backbone_step"),
              ("step_verify_ms", "block step, verify/commit", "backbone_step"))
    for key, label, floor in stages:
        lines.append(f"| {label} | {f(fw['floor_ms'][floor])} | {f(fw.get('eager', {}).get(key))} | "
                     f"{f(fw.get('compiled', {}).get(key))} | "
                     f"{f(fw.get('cuda_graph', {}).get(key))} | {f(trt.get(key))} |")
    lines += ["", "## Plan latency, ms (vision + prefill + decode, batch 1)", "",
              "| schema | decoder | forwards | eager | compiled | CUDA graphs | CUDA graphs at forwards used "
              "| forwards used | same tokens |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in res["plans"]:
        used = f"{p['estimate_forwards']:.0f} ({p['estimate_source']})"
        lines.append(f"| {p['schema']} | {p['decoder']} | {p['forwards']} | {f(p.get('eager_ms'))} | "
                     f"{f(p.get('compiled_ms'))} | "
                     f"{f(p.get('cuda_graph_ms'))} | {f(p.get('cuda_graph_estimate_ms'))} | {used} | "
                     f"{p['identical_tokens']} |")
    mem = res["peak_memory_gb"]
    lines += ["", "speculative vs AR tokens: " + ", ".join(
        f"{k} {v['token_match']:.3f}{' (identical)' if v['identical'] else ''}"
        for k, v in res.get("speculative_vs_ar", {}).items())]
    lines += ["sampled plan + 4 sampled rollouts: " + ", ".join(
        f"{k} {'ok' if v['ok'] else 'BAD TOKENS'}" for k, v in res.get("sampled_rollouts", {}).items())]
    lines += ["graph capture at warm-up: " + ", ".join(
        f"{k} {v['graphs']} graphs in {v['seconds']} s" for k, v in res.get("capture", {}).items())]
    if res["dry_run"]:
        lines += ["", "dry run: the CUDA graphs column runs the same static-buffer calls without capture"]
    lines += ["", "peak GPU memory, GB: " + (", ".join(f"{k} {v:.2f}" for k, v in mem.items()) if mem else "n/a (CPU)"),
              f"total {res['seconds']:.0f} s"]
    lines += [f"FAILED {k}: {v}" for k, v in res["errors"].items()]
    lines += [f"skipped {k}: {v}" for k, v in res.get("skipped", {}).items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def measure_backend(kind: str, case: Case, res: dict[str, Any], trained: dict, device: torch.device,
                    dtype: torch.dtype, clock: Clock, iters: int, plans: int, graphs: bool) -> None:
    """Forward latency (fast_ddrive) and plan latency of every decoder on one backend kind, into `res`."""
    backends = {w: make(kind, case, w, device, dtype, graphs) for w in {case.ar.window, case.main.window}}
    if kind == "cuda_graph":  # capture every step shape before timing: no plan pays a capture
        for layout, modes in ((case.ar, (False,)), (case.main, (True, False))):
            t0 = time.perf_counter()
            count = backends[layout.window].warmup(layout, 1, modes)
            res.setdefault("capture", {})[f"{case.name}/block{layout.block_size}"] = {
                "graphs": count, "seconds": round(time.perf_counter() - t0, 2)}
    ids_by_decoder = {}
    if "forward" in res and res["forward"]["schema"] == case.name:
        res["forward"][kind] = forward_latency(backends[case.main.window], case, clock, iters)
    for label, decoder, knobs in DECODERS:
        layout = case.ar if decoder == "ar" else case.main
        r = plan_latency(backends[layout.window], layout, case, decoder, knobs, plans, clock)
        ids_by_decoder[decoder] = r["ids"]
        row = next((p for p in res["plans"] if p["schema"] == case.name and p["decoder"] == label), None)
        if row is None:
            row = {"schema": case.name, "decoder": label, "forwards": r["forwards"], "_ids": r["ids"]}
            res["plans"].append(row)
        row[f"{kind}_ms"] = r["ms_per_plan"]
        # a trained model accepts more drafts: scale this backend's decode time to its forward count
        known = trained.get(case.name, {}).get(label) if decoder == "speculative" else None
        row["estimate_forwards"] = known or r["forwards"]
        row["estimate_source"] = "shipped tiny model" if known else "measured"
        row[f"{kind}_estimate_ms"] = r["prompt_ms"] + r["decode_ms"] * row["estimate_forwards"] / r["forwards"]
        row["identical_tokens"] = bool(torch.equal(row["_ids"], r["ids"])) and row.get("identical_tokens", True)
    # exact by construction in fp32; in bf16 the AR (1-token) and speculative (block) forwards run other
    # kernels, so near-ties may flip: report the token agreement instead of assuming it
    spec, ar = ids_by_decoder["speculative"], ids_by_decoder["ar"]
    res.setdefault("speculative_vs_ar", {})[f"{case.name}/{kind}"] = {
        "identical": bool(torch.equal(spec, ar)), "token_match": float((spec == ar).float().mean())}
    res.setdefault("sampled_rollouts", {})[f"{case.name}/{kind}"] = sampled_rollouts(kind, case, device, dtype, graphs)


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run to exercise this benchmark on the CPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu" if dry else "cuda")
    dtype = torch.float32 if dry else torch.bfloat16
    config = "tiny" if dry else args.config
    clock = Clock(device)
    iters = 3 if dry else 50
    plans = args.plans or (1 if dry else 3)
    res: dict[str, Any] = {
        "model": config, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__, "dry_run": dry,
        "device": torch.cuda.get_device_name(0) if not dry else "cpu (dry run)", "plans_per_point": plans,
        "plans": [], "peak_memory_gb": {}, "errors": {},
    }
    res["bandwidth_gbs"] = copy_bandwidth(device, (64 << 20) if dry else (2 << 30), clock)
    trained = trained_forwards(args.forwards_from)
    for schema in SCHEMAS:
        case = Case(schema, config, device, dtype)
        log.info("%s: %s, %d params", schema, config, sum(p.numel() for p in case.model.parameters()))
        if schema == "fast_ddrive":
            weights = weight_bytes(case.model)
            res["forward"] = {"schema": schema, "window": case.main.window, "prompt_len": case.model.cfg.prompt_len,
                              "weight_bytes": weights,
                              "floor_ms": {k: v / (res["bandwidth_gbs"] * 1e9) * 1e3 for k, v in weights.items()}}
        for kind in BACKENDS:
            if kind == "compiled" and not args.compile:
                res.setdefault("skipped", {})[f"{schema}/compiled"] = "off (--compile: its compile time is unbounded)"
                continue
            if kind == "compiled" and (dry or args.budget_s - (time.perf_counter() - t_start) < COMPILE_SECONDS_NEEDED):
                res.setdefault("skipped", {})[f"{schema}/compiled"] = "dry run or too little of the time budget left"
                continue
            if not dry:
                torch.cuda.reset_peak_memory_stats()
            try:
                measure_backend(kind, case, res, trained, device, dtype, clock, iters, plans, graphs=not dry)
            except Exception as err:  # noqa: BLE001 - one failing backend must not cost the other's numbers
                log.exception("%s/%s failed", schema, kind)
                res["errors"][f"{schema}/{kind}"] = repr(err)
            if not dry:
                res["peak_memory_gb"][f"{schema}/{kind}"] = torch.cuda.max_memory_allocated() / 1e9
                torch.cuda.empty_cache()
            log.info("%s/%s done at %.0f s", schema, kind, time.perf_counter() - t_start)
        if schema == "fast_ddrive":
            try:
                res["tensorrt"] = tensorrt_latency(case, device, dtype, clock, iters,
                                                   args.budget_s - (time.perf_counter() - t_start))
            except Exception as err:  # noqa: BLE001
                log.exception("TensorRT failed")
                res["tensorrt"] = {"available": True, "note": f"failed: {err!r}"}
        for row in res["plans"]:
            row.pop("_ids", None)
        del case
        if not dry:
            torch.cuda.empty_cache()
    res["seconds"] = time.perf_counter() - t_start
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny config, float32: the same code path, no GPU")
    p.add_argument("--config", default="base-0.8b", help="model config (random weights)")
    p.add_argument("--plans", type=int, default=0, help="timed plans per point (default 3; 1 for --dry-run)")
    p.add_argument("--out", default=None, help="JSON file (default bench/results/gpu_h200.json, or gpu_dryrun.json)")
    p.add_argument("--forwards-from", default=FORWARDS_FROM,
                   help="SCHEMA=PATH,...: `ddrive bench decoding` JSONs of the shipped models (their speculative forward "
                        "counts); a bare PATH takes its schema from the file")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (dry run)")
    p.add_argument("--compile", action="store_true",
                   help="also time torch.compile; off by default: on an H200 compiling the 0.8B model's step shapes ran "
                        "past 6 minutes without finishing (the first device run), which no time budget here can stop")
    p.add_argument("--budget-s", type=float, default=280.0, help="time budget; TensorRT is skipped when it would not fit")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    res = run(args)
    out = Path(args.out or REPO / "bench" / "results" / ("gpu_dryrun.json" if args.dry_run else "gpu_h200.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    sys.stdout.write(markdown(res) + "\n")
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
