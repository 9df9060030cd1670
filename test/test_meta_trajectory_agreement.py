"""bench/meta_trajectory_agreement.py: does the plan's trajectory make the manoeuvre its meta names?"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import load_bench_script

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "meta_trajectory_agreement.py"


def test_the_rule_reads_lane_changes_by_offset_and_turns_by_heading():
    bench = load_bench_script("meta_trajectory_agreement")
    assert bench.makes("LEFT_CHANGE", 3.4, 2.0) and not bench.makes("LEFT_CHANGE", 0.2, 2.0)
    assert bench.makes("RIGHT_CHANGE", -1.2, 0.0) and not bench.makes("RIGHT_CHANGE", 1.2, 0.0)
    assert bench.makes("LEFT_TURN", 6.0, 80.0) and not bench.makes("LEFT_TURN", 6.0, 5.0)
    assert bench.makes("RIGHT_TURN", -6.0, -40.0) and not bench.makes("RIGHT_TURN", 0.0, 0.0)
    assert bench.makes("STRAIGHT", 0.3, 3.0) and not bench.makes("STRAIGHT", 3.5, 0.0)
    rows = bench.table([{"label": "LEFT_CHANGE", "meta": "LEFT_CHANGE", "plan_y_end": 0.0, "plan_yaw_end_deg": 0.0,
                         "expert_y_end": 3.5, "expert_yaw_end_deg": 0.0}])
    assert rows == [{"label": "LEFT_CHANGE", "samples": 1, "meta_right": 1, "trajectory_makes_it": 0,
                     "expert_makes_it": 1, "both": 0}]


def test_a_few_validation_samples_are_measured(tmp_path):
    out = tmp_path / "agree.json"
    png = tmp_path / "agree.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--seed", "31", "--episodes", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert len(res["samples"]) == 3 and sum(r["samples"] for r in res["rows"]) == 3
    assert "| label | samples | meta_right |" in proc.stdout
    # the picture is drawn from saved runs, two side by side, without planning again
    proc = subprocess.run([sys.executable, str(SCRIPT), "--replot", str(out), str(out), "--plot", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and png.stat().st_size > 10_000, proc.stderr[-2000:]


def test_a_checkpoint_without_meta_is_refused():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint", "trajectory_only_tiny", "--episodes", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "has no meta behaviour" in proc.stderr
