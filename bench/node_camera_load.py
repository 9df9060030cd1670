"""The planner node under vehicle-like camera load (a benchmark, not a test).

A feed process publishes three cameras (raw rgb8 or JPEG) at --camera-hz and odometry at 50 Hz,
stamped with the wall clock, side cameras up to 40 ms after the front; the real `ddrive_planner`
node runs in its own process (Fast DDS) and this process watches it. Per run: plans/s over the
measurement window, skipped ticks, sync failures, plan and end-to-end (tick -> published) latency
p50/p90, the rate a plan allows (min(asked, 1000 / plan p50 ms)) and the node's RSS over the run.

    python bench/node_camera_load.py                      # the default runs below
    python bench/node_camera_load.py --runs trajectory_only_tiny:onnx:10:640x360:raw --seconds 20

A run is checkpoint:backend:rate_hz:WxH:raw|jpeg[:seconds[:shm|default]] (backend flags after `+`: `onnx+int8`
sets the node's int8 parameter on ONNX Runtime, `+noprior` turns draft_previous off): the last field picks the
Fast DDS transport of the node and the feed: `shm` (default) uses config/fastdds_large_messages.xml
(a shared-memory segment that holds raw frames), `default` Fast DDS's defaults (512 KiB segment: raw
640x360 frames go over UDP in fragments, and best-effort readers lose them).
Results: bench/results/node_camera_load.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ddrive_ros.ros import interface as I
from ddrive_ros.ros.domain_id import SLOTS, pid_domain_id
from ddrive_ros.ros.listener import Listener, start_feed
from ddrive_ros.ros.node_process import NodeProcess

PROFILE = Path(__file__).resolve().parents[1] / "config" / "fastdds_large_messages.xml"
DEFAULT_RUNS = [
    "trajectory_only_tiny:onnx:10:640x360:raw:30:default",  # Fast DDS defaults, for comparison
    "trajectory_only_tiny:onnx:10:640x360:raw",
    "trajectory_only_tiny:onnx:10:640x360:jpeg",
    "fast_ddrive_tiny:torch:10:640x360:raw",
    "fast_ddrive_tiny:torch:10:640x360:jpeg",
    "trajectory_only_tiny:onnx:10:1920x1080:raw:120",  # RSS over a longer run at 1080p
]


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def run_one(spec: str, seconds: float, threads: int, domain: int, tmp: Path) -> dict:
    parts = spec.split(":")
    checkpoint, backend, rate, size, kind = parts[:5]
    seconds = float(parts[5]) if len(parts) > 5 else seconds
    transport = parts[6] if len(parts) > 6 else "shm"
    env = {k: v for k, v in os.environ.items() if k != "FASTRTPS_DEFAULT_PROFILES_FILE"}
    if transport == "shm":
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(PROFILE)
    w, h = (int(v) for v in size.split("x"))
    jpeg = kind == "jpeg"
    backend, *flags = backend.split("+")
    unknown = set(flags) - {"int8", "noprior"}
    if unknown:
        raise SystemExit(f"run {spec!r}: unknown backend flags {sorted(unknown)} (int8, noprior)")
    params = {"checkpoint": checkpoint, "backend": backend, "int8": "int8" in flags,
              "draft_previous": "noprior" not in flags,
              "decoder": "speculative", "planning_rate_hz": float(rate), "num_threads": threads, "diagnostics_rate_hz": 1.0, "camera_type": "compressed" if jpeg else "raw",
              "plan_timeout_s": 5.0}
    log_dir = tmp / spec.replace(":", "_")
    log_dir.mkdir(parents=True, exist_ok=True)
    node = NodeProcess(params, domain, log_dir / "node.log", remaps=I.bag_remaps(jpeg), env=env)
    feed = start_feed(domain, log_dir / "feed.log", env=env, width=w, height=h, camera_hz=10, odom_hz=50,
                      side_delay_max=0.04, jpeg=jpeg, duration=seconds + 300)
    listener = Listener(domain)
    rss: list[tuple[float, int]] = []
    try:
        listener.wait_for(lambda: any(not p["fallback"] for _, p in listener.plans), 300, "a first plan")
        time.sleep(2.0)  # past start-up transients (history fill, allocator warm-up)
        t0 = time.monotonic()
        d0 = listener.planning()[2]
        n0 = len(listener.plans)
        while time.monotonic() - t0 < seconds:
            rss.append((round(time.monotonic() - t0, 1), node.rss_kb()))
            time.sleep(1.0)
            if not node.alive():
                raise RuntimeError(f"node died:\n{node.tail()}")
        t1 = time.monotonic()
        d1 = listener.planning()[2]
        window = [p for t, p in listener.plans[n0:] if t0 <= t <= t1]
        total_ms = [v for t, v in listener.processing_ms if t0 <= t <= t1]
    finally:
        listener.close()
        feed.terminate()
        feed.wait(10)
        node.stop()
    real = [p for p in window if not p["fallback"]]
    plan_ms = [p["latency_ms"]["plan"] for p in real]
    decode_ms = [p["latency_ms"]["image_decode"] for p in real]
    delta = {k: int(d1[k]) - int(d0[k]) for k in ("ticks", "plans", "skipped_ticks", "no_new_set", "catch_ups", "late_sets")}
    sync_failed = sum(int(v) for k, v in d1.items() if k.startswith("sync_failed/"))
    plans_per_s = len(real) / (t1 - t0)
    allowed = min(float(rate), 1000.0 / statistics.median(plan_ms)) if plan_ms else None
    kb = [v for _, v in rss if v > 0]
    half = len(kb) // 2
    return {
        "run": spec, "transport": transport, "checkpoint": checkpoint, "backend": backend, "rate_hz": float(rate), "camera": f"{w}x{h} {kind}",
        "seconds": round(t1 - t0, 1), "plans_per_s": round(plans_per_s, 2), "fallback_plans": len(window) - len(real),
        "ticks": delta["ticks"], "skipped_ticks": delta["skipped_ticks"], "no_new_set": delta["no_new_set"], "catch_ups": delta["catch_ups"], "late_sets": delta["late_sets"],
        "sync_failed_total": sync_failed,
        "plan_ms_p50": _pct(plan_ms, 50), "plan_ms_p90": _pct(plan_ms, 90),
        "total_ms_p50": _pct(total_ms, 50), "total_ms_p90": _pct(total_ms, 90),
        "image_decode_ms_p50": _pct(decode_ms, 50),
        "rate_a_plan_allows_hz": round(allowed, 2) if allowed else None,
        "plans_per_s_over_allowed": round(plans_per_s / allowed, 3) if allowed else None,
        "rss_mb_first_half_mean": round(statistics.mean(kb[:half]) / 1024, 1) if half else None,
        "rss_mb_second_half_mean": round(statistics.mean(kb[half:]) / 1024, 1) if half else None,
        "rss_mb_max": round(max(kb) / 1024, 1) if kb else None,
        "rss_kb": rss,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="comma-separated runs (see above)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per run (after start-up)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the node")
    ap.add_argument("--json", default="bench/results/node_camera_load.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddrive_camera_load_"))
    rows = []
    for i, spec in enumerate(args.runs.split(",")):
        rows.append(run_one(spec, args.seconds, args.threads, pid_domain_id(i % SLOTS), tmp))
        r = rows[-1]
        print(f"{r['run']:<48} {r['plans_per_s']:>6.2f} plans/s  skipped {r['skipped_ticks']:>3}/{r['ticks']:<4} "
              f"sync_failed {r['sync_failed_total']}  plan p50/p90 {r['plan_ms_p50']}/{r['plan_ms_p90']} ms  "
              f"allowed {r['rate_a_plan_allows_hz']} Hz  RSS {r['rss_mb_first_half_mean']} -> "
              f"{r['rss_mb_second_half_mean']} MB", flush=True)
    load = os.getloadavg()
    doc = {"command": "python bench/node_camera_load.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU",
           "load_average_at_end": [round(v, 2) for v in load],
           "note": "2 CPU cores shared with other jobs (load average above): rates and latencies are noisy and "
                   "lower than on an idle machine; the feed, the node and this watcher share the cores",
           "rows": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
