"""`ddrive bench decoding|runtime`: forwards per plan, tokens per forward, latency, ratio to AR (same run)."""
from __future__ import annotations

import argparse
import json
import logging
import resource
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DECODERS: list[tuple[str, str, dict[str, Any]]] = [
    ("ar", "ar", {}),
    ("diffusion", "diffusion", {"tau": 0.9}),
    ("diffusion-4step", "diffusion", {"steps": 4, "tau": 1.01}),
    ("speculative", "speculative", {}),
    ("s2d2", "s2d2", {}),
]


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks that print tables (and JSON)")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    for name, help_ in (("decoding", "decoders on one backend: forwards, tokens/forward, ms/plan, ratio to AR"),
                        ("runtime", "decoder x backend table: ms/plan, ms/token, tokens/s, peak memory")):
        b = bsub.add_parser(name, help=help_)
        b.add_argument("--config", default="tiny", help="model config with random weights (ignored with --checkpoint)")
        b.add_argument("--schema", default="fast_ddrive", help="schema for --config")
        b.add_argument("--checkpoint", default=None, help="checkpoint folder or shipped model name")
        b.add_argument("--plans", type=int, default=5)
        b.add_argument("--json", default=None, help="write the rows as JSON to this file")
        b.add_argument("--device", default="cpu")
        b.add_argument("--random-observations", action="store_true",
                       help="plan on random pixels instead of synthetic-world observations (recorded in the JSON)")
        if name == "runtime":
            b.add_argument("--backends", default="torch,onnx", help="comma-separated backends")
        b.set_defaults(func=run_decoding if name == "decoding" else run_runtime)
    p.set_defaults(func=lambda a: p.print_help() or 2)


def load_bundle(args):
    from ddrive_ros import checkpoint as ckpt

    if args.checkpoint:
        return ckpt.load(args.checkpoint)
    return ckpt.build_random(args.config, args.schema)


def bench_observations(n: int, seed: int = 0, source: str = "world"):
    """Observations to plan on: camera images and ego states of synthetic-world episodes (seed
    10_000 + seed, never a training or evaluation seed), or random pixels when asked for."""
    if source == "world":
        from ddrive_ros.sim.sample import samples_from_world

        samples = []
        for sample in samples_from_world(seed=10_000 + seed, n_episodes=max(1, n // 4 + 1), progress=False):
            samples.append(sample)
            if len(samples) == n:
                return [s.observation for s in samples]
        raise ValueError(f"the synthetic world gave {len(samples)} observations, {n} asked for")
    if source != "random":
        raise ValueError(f"observation source must be world or random, got {source!r}")
    from ddrive_ros.observation import Observation

    rng = np.random.default_rng(seed)
    return [Observation(images=rng.integers(0, 255, (2, 3, 96, 160, 3), dtype=np.uint8), speed=float(rng.uniform(0, 12)),
                        accel=0.0, yaw_rate=0.0, past_xy=np.stack([np.linspace(-8, -2, 4), np.zeros(4)], 1))
            for _ in range(n)]


def measure(bundle, observations, decoder: str, knobs: dict, backend: str = "torch", device: str = "cpu") -> dict[str, Any]:
    from ddrive_ros.planner import Planner, PlannerOptions

    planner = Planner(bundle, PlannerOptions(backend=backend, decoder=decoder, knobs=knobs, device=device))
    planner.plan(observations[0])  # warm-up
    plans = [planner.plan(o) for o in observations]
    fwd = np.mean([p.stats.forwards for p in plans])
    decided = np.mean([p.stats.tokens_decided for p in plans])
    ms = np.mean([p.stats.wall_ms for p in plans])
    return {
        "forwards_per_plan": float(fwd),
        "tokens_per_forward": float(decided / max(fwd - 1, 1)),
        "ms_per_plan": float(ms),
        "ms_per_token": float(ms / max(decided, 1)),
        "tokens_per_s": float(decided / (ms / 1e3)),
        "_ids": [tuple(np.round(p.waypoints, 3).ravel()) + (p.explanation,) + tuple(sorted(p.critical_objects.items())) for p in plans],
    }


def run_decoding(args: argparse.Namespace) -> int:
    bundle = load_bundle(args)
    source = observation_source(args)
    obs = bench_observations(args.plans, source=source)
    rows = []
    from tqdm import tqdm

    for label, decoder, knobs in tqdm(DECODERS, desc="decoders", leave=False):
        r = measure(bundle, obs, decoder, knobs, device=args.device)
        rows.append({"decoder": label, **r})
    ar = rows[0]
    for r in rows:
        r["ratio_to_ar"] = ar["ms_per_plan"] / r["ms_per_plan"]
        r["forward_ratio_to_ar"] = ar["forwards_per_plan"] / r["forwards_per_plan"]
        r["identical_to_ar"] = r["_ids"] == ar["_ids"]
    for r in rows:
        r.pop("_ids")
    src = args.checkpoint or f"{args.config} (random weights), schema {args.schema}"
    print(f"decoding benchmark: {src}, {args.plans} plans on {source} observations, backend torch on {args.device}")
    print(f"{'decoder':<16}{'fwd/plan':>9}{'tok/fwd':>8}{'ms/plan':>9}{'x AR (time)':>12}{'x AR (fwd)':>11}  identical to AR")
    for r in rows:
        print(f"{r['decoder']:<16}{r['forwards_per_plan']:>9.1f}{r['tokens_per_forward']:>8.2f}{r['ms_per_plan']:>9.1f}"
              f"{r['ratio_to_ar']:>12.2f}{r['forward_ratio_to_ar']:>11.2f}  {r['identical_to_ar']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"source": src, "observation_source": source, "plans": args.plans,
                                                     "rows": rows}, indent=2))
    return 0


def observation_source(args: argparse.Namespace) -> str:
    return "random" if args.random_observations else "world"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_runtime(args: argparse.Namespace) -> int:
    """Decoder x backend table, ratios against AR on torch eager in the same run."""
    from tqdm import tqdm

    bundle = load_bundle(args)
    source = observation_source(args)
    observations = bench_observations(args.plans, source=source)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows = []
    for backend in backends:
        for label, decoder, knobs in tqdm(DECODERS, desc=f"{backend}", leave=False):
            try:
                r = measure(bundle, observations, decoder, knobs, backend=backend, device=args.device)
            except (RuntimeError, ImportError, ValueError) as e:  # a backend missing here is a row, not a crash
                log.warning("backend %s, decoder %s: %s", backend, label, e)
                rows.append({"backend": backend, "decoder": label, "error": str(e)})
                continue
            r.pop("_ids")
            rows.append({"backend": backend, "decoder": label, **r, "peak_rss_mb": peak_rss_mb()})
    base = next((r for r in rows if r.get("backend") == "torch" and r["decoder"] == "ar" and "error" not in r), None)
    src = args.checkpoint or f"{args.config} (random weights), schema {args.schema}"
    print(f"runtime benchmark: {src}, {args.plans} plans on {source} observations, {args.device}; "
          "ratios vs AR on torch eager, same run")
    print(f"{'backend':<10}{'decoder':<16}{'fwd/plan':>9}{'tok/fwd':>8}{'ms/plan':>9}{'ms/tok':>8}{'tok/s':>8}{'peak MB':>9}{'x AR':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<10}{r['decoder']:<16}  error: {r['error'][:80]}")
            continue
        r["ratio_to_ar_eager"] = base["ms_per_plan"] / r["ms_per_plan"] if base else None
        print(f"{r['backend']:<10}{r['decoder']:<16}{r['forwards_per_plan']:>9.1f}{r['tokens_per_forward']:>8.2f}"
              f"{r['ms_per_plan']:>9.1f}{r['ms_per_token']:>8.2f}{r['tokens_per_s']:>8.0f}{r['peak_rss_mb']:>9.0f}"
              f"{(r['ratio_to_ar_eager'] or 0):>7.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"source": src, "observation_source": source, "plans": args.plans,
                                               "rows": rows}, indent=2))
    return 0
