"""bench/cpu_speed.py runs end to end on a real observation and writes its table and JSON."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_cpu_speed_bench_writes_rows_with_agreement_and_ratio_to_ar(tmp_path):
    out = tmp_path / "cpu_speed.json"
    proc = subprocess.run([sys.executable, "bench/cpu_speed.py", "--plans", "1", "--threads", "1", "--paths",
                           "onnxruntime", "--decoders", "speculative,speculative:redraft=causal", "--trajectory-paths", "", "--export-dir", str(tmp_path / "onnx"),
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| fast_ddrive_tiny | speculative | onnxruntime |" in proc.stdout
    res = json.loads(out.read_text())
    rows = {(r["decoder"], r["path"]): r for r in res["rows"]}
    assert set(rows) == {("ar", "torch_eager"), ("speculative", "onnxruntime"), ("speculative", "torch_eager"),
                         ("speculative:redraft=causal", "onnxruntime")}
    # a decoder knob changes the schedule of forwards, never the greedy plan
    assert rows[("speculative:redraft=causal", "onnxruntime")]["token_match_vs_eager_speculative"] == 1.0
    ort = rows[("speculative", "onnxruntime")]
    assert ort["token_match_vs_eager_speculative"] == 1.0 and ort["ade_diff_vs_eager_m"] == 0.0
    assert ort["forwards_per_plan"] < rows[("ar", "torch_eager")]["forwards_per_plan"] / 3
    assert ort["x_faster_than_eager_ar"] > 0 and res["machine"]["shared"] and res["verdict"]["fastest_full_plan_path"]
    assert all(g > 0 for g in res["machine"]["host_gflops_before_after"])  # the host speed beside the milliseconds
    # where the time goes: the stages add up to the mean plan, and decode steps take part of it
    stages = {(r["decoder"], r["path"]): r for r in res["stages_ms"]}
    st = stages[("speculative", "onnxruntime")]
    parts = sum(st[k] for k in ("preprocess", "vision", "prefill", "steps", "loop_host", "postprocess", "other"))
    assert abs(parts - st["mean_plan_ms"]) < 0.05 * st["mean_plan_ms"] + 0.1
    assert 0 < st["steps"] < st["mean_plan_ms"] and st["vision"] > 0 and st["prefill"] > 0
    assert "Where the time goes" in proc.stdout


def test_cpu_speed_stream_drafts_from_the_previous_plan_with_the_same_tokens(tmp_path):
    out = tmp_path / "stream.json"
    proc = subprocess.run([sys.executable, "bench/cpu_speed.py", "--plans", "3", "--threads", "1", "--stream", "5",
                           "--paths", "torch_eager", "--decoders", "speculative,speculative:draft_previous=0", "--trajectory-paths", "",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["observations"].startswith("stream")
    rows = {(r["decoder"], r["path"]): r for r in res["rows"]}
    with_prior, without = rows[("speculative", "torch_eager")], rows[("speculative:draft_previous=0", "torch_eager")]
    assert with_prior["prior_blocks_per_plan"] > 0 and without["prior_blocks_per_plan"] == 0
    assert without["token_match_vs_eager_speculative"] == 1.0  # the draft changes the cost, never the plan
    # (that it lowers the cost over a stream is test_previous_plan_draft's: three frames are too few here)


def test_fastest_passes_over_a_faster_path_that_moves_the_plans():
    from conftest import load_bench_script

    bench = load_bench_script("cpu_speed")
    rows = [{"path": "torch_eager", "decoder": "speculative", "p50_ms": 300.0, "ade_diff_vs_eager_m": 0.0},
            {"path": "onnxruntime", "decoder": "speculative", "p50_ms": 255.7, "ade_diff_vs_eager_m": 0.0},
            {"path": "onnxruntime_int8", "decoder": "speculative", "p50_ms": 248.9, "ade_diff_vs_eager_m": 0.335}]
    best, passed_over = bench.fastest(rows)
    assert best["path"] == "onnxruntime" and [r["path"] for r in passed_over] == ["onnxruntime_int8"]
    rows[2]["ade_diff_vs_eager_m"] = -0.01  # within the gate either way: int8 is the fastest again
    best, passed_over = bench.fastest(rows)
    assert best["path"] == "onnxruntime_int8" and passed_over == []
