"""bench/lane_change_onset.py: the greedy plan and sampled rollouts at a lane change's first driven frame."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "lane_change_onset.py"


def test_one_lane_change_is_measured_greedy_and_sampled(tmp_path):
    out = tmp_path / "onset.json"
    # episode 0 of validation seed 31 is a left lane change
    proc = subprocess.run([sys.executable, str(SCRIPT), "--checkpoints", "trajectory_only_tiny", "--seed", "31",
                           "--episodes", "1", "--samples", "4", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["direction"] == "left" and rows[0]["samples"] == 4
    assert np.isfinite(rows[0]["greedy_share"]) and 0.0 <= rows[0]["samples_over_half"] <= 1.0
    assert "| trajectory_only_tiny |" in proc.stdout


def test_a_seed_prefix_without_lane_changes_is_named():
    # the first two episodes of seed 5 are a left turn and a lane follow
    proc = subprocess.run([sys.executable, str(SCRIPT), "--checkpoints", "trajectory_only_tiny", "--seed", "5",
                           "--episodes", "2", "--samples", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "no lane-change episodes in the first 2 of seed 5" in proc.stderr
