"""`ddrive bench runtime`: decoder x backend table, ratios against AR on torch eager in the same run."""
from __future__ import annotations

import json
import resource
from pathlib import Path

from tqdm import tqdm

from ddrive_ros.commands.bench import DECODERS, measure


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_runtime_bench(args, bundle, observations) -> int:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows = []
    for backend in backends:
        for label, decoder, knobs in tqdm(DECODERS, desc=f"{backend}", leave=False):
            try:
                r = measure(bundle, observations, decoder, knobs, backend=backend, device=args.device)
            except (RuntimeError, ImportError, ValueError) as e:
                rows.append({"backend": backend, "decoder": label, "error": str(e)})
                continue
            r.pop("_ids")
            rows.append({"backend": backend, "decoder": label, **r, "peak_rss_mb": peak_rss_mb()})
    base = next((r for r in rows if r.get("backend") == "torch" and r["decoder"] == "ar" and "error" not in r), None)
    src = args.checkpoint or f"{args.config} (random weights), schema {args.schema}"
    print(f"runtime benchmark: {src}, {args.plans} plans on {args.device}; ratios vs AR on torch eager, same run")
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
        Path(args.json).write_text(json.dumps({"source": src, "plans": args.plans, "rows": rows}, indent=2))
    return 0
