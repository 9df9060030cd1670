"""bench/rollout_spread.py: N sampled rollouts against the greedy plan, on the shipped models."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddrive_ros.evaluation.evaluate import held_out_samples
from conftest import load_bench_script

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "rollout_spread.py"


@pytest.fixture(scope="module")
def spread():
    return load_bench_script("rollout_spread")


def test_greedy_rollouts_have_no_spread_and_sampled_ones_some(spread):
    samples = held_out_samples(31, 3)
    cold = spread.spread_rows("fast_ddrive_tiny", samples, rollouts=3, temperature=0.0)
    # temperature 0: every rollout is the greedy plan, so they coincide and so does their mean
    assert cold["lateral_spread_m_p90"] == 0.0 and cold["mean_vs_greedy_5s_m_p90"] < 1e-6, cold
    warm = spread.spread_rows("fast_ddrive_tiny", samples, rollouts=3, temperature=1.0)
    assert warm["samples"] == 3 and warm["lateral_spread_m_p90"] > 0.0, warm
    assert 0.0 <= warm["share_spread_over_lane"] <= 1.0


def test_one_rollout_is_refused():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rollouts", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--rollouts must be >= 2" in proc.stderr
