"""bench/safety_perception.py on the saved validation runs: its pooled numbers are the paired comparison's, and a
partial or missing run is refused by name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_bench_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_pools_the_saved_runs_as_the_paired_comparison_does(tmp_path, monkeypatch):
    safety_perception = load_bench_script("safety_perception")
    monkeypatch.chdir(ROOT)
    out = tmp_path / "t.json"
    assert safety_perception.main(["--json", str(out)]) == 0
    rows = {r["setting"]: r for r in json.loads(out.read_text())["rows"]}
    cmp = json.loads((ROOT / "bench/results/compare_val6_safety_objects.json").read_text())["metrics"]["pdms"]
    objects = rows["road users, no map"]
    assert objects["episodes"] == cmp["n"] == 360
    assert objects["pdms"] == pytest.approx(cmp["new"], abs=1e-12)
    assert rows["reflect off (default)"]["pdms"] == pytest.approx(cmp["base"], abs=1e-12)
    assert objects["pdms_diff"] == pytest.approx(cmp["diff"], abs=1e-12)
    assert objects["pdms_diff_se"] == pytest.approx(cmp["se"], abs=1e-12)
    assert "pdms_diff" not in rows["IDM lane follower"]


def test_a_partial_or_missing_run_is_refused_by_name(tmp_path):
    safety_perception = load_bench_script("safety_perception")

    run = {"config": {"partial": True}, "episodes": [{"seed": 1, "method": "speculative", "pdms": 1.0}]}
    (tmp_path / "sim_60_val5_fast_ddrive_brake_objects_bins.json").write_text(json.dumps(run))
    with pytest.raises(ValueError, match="sim_60_val5_fast_ddrive_brake_objects_bins.json: a partial run"):
        safety_perception.main(["--seeds", "5", "--results", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="sim_60_val6_fast_ddrive_brake_objects_bins.json"):
        safety_perception.main(["--seeds", "6", "--results", str(tmp_path)])
