"""The GPU benchmark's dry run: the same code path on the CPU, with the imports the bare GPU machine allows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = ("rclpy", "cv2", "tqdm", "rosbags")

# the GPU machine lacks these: make them unimportable, as there (torch itself falls back without tqdm)
RUN = """
import importlib.abc, importlib.util, json, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in %r:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Missing())
spec = importlib.util.spec_from_file_location("gpu_bench", "bench/gpu_bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
rc = bench.main(sys.argv[1:])
print(json.dumps({"rc": rc, "imported": [m for m in %r if m in sys.modules]}))
""" % (FORBIDDEN, FORBIDDEN)


def test_gpu_bench_dry_run_writes_results_without_ros_opencv_or_tqdm(tmp_path):
    counts = tmp_path / "decoding_cpu.json"
    counts.write_text(json.dumps({"source": "shipped tiny", "rows": [{"decoder": "speculative", "forwards_per_plan": 40.0}]}))
    bins = tmp_path / "decoding_cpu_bins.json"
    bins.write_text(json.dumps({"source": "fast_ddrive_tiny", "rows": [{"decoder": "speculative", "forwards_per_plan": 30.0}]}))
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", RUN, "--dry-run", "--threads", "1", "--out", str(out),
                           "--forwards-from", f"{counts},fast_ddrive_bins={bins}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status == {"rc": 0, "imported": []}
    assert "| block step, draft |" in proc.stdout
    res = json.loads(out.read_text())
    assert res["dry_run"] and res["bandwidth_gbs"] > 0 and res["errors"] == {}
    assert set(res["forward"]["eager"]) == {"vision_ms", "prefill_ms", "step_draft_ms", "step_verify_ms"}
    rows = {(p["schema"], p["decoder"]): p for p in res["plans"]}
    assert len(rows) == 9 and all(p["identical_tokens"] for p in rows.values())
    spec = rows[("fast_ddrive", "speculative")]
    assert spec["estimate_forwards"] == 40.0 and spec["estimate_source"] == "shipped tiny model"
    # SCHEMA=PATH names the schema: the bin-coded full plan takes its own shipped model's count
    assert rows[("fast_ddrive_bins", "speculative")]["estimate_forwards"] == 30.0
    assert spec["cuda_graph_estimate_ms"] < spec["cuda_graph_ms"]
    assert rows[("trajectory_only", "speculative")]["estimate_source"] == "measured"
    assert res["tensorrt"]["note"]
    # fp32 on the CPU: speculative gives AR's tokens; sampled rollouts run on every backend kind
    assert all(v["identical"] for v in res["speculative_vs_ar"].values()), res["speculative_vs_ar"]
    assert set(res["sampled_rollouts"]) == {f"{s}/{k}" for s in ("fast_ddrive", "fast_ddrive_bins", "trajectory_only")
                                            for k in ("eager", "cuda_graph")}
    assert all(v["ok"] and v["rows"] == 4 for v in res["sampled_rollouts"].values())
    assert res["capture"]["fast_ddrive/block32"]["graphs"] > 0
    assert set(res["skipped"]) == {"fast_ddrive/compiled", "fast_ddrive_bins/compiled", "trajectory_only/compiled"}


def test_gpu_bench_refuses_an_unknown_schema_in_forwards_from(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "bench/gpu_bench.py", "--dry-run", "--out", str(tmp_path / "g.json"),
                           "--forwards-from", "fast_ddrive_digits=x.json"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "unknown schema 'fast_ddrive_digits'" in proc.stderr
