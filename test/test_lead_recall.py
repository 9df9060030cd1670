"""bench/lead_recall.py: the lead vehicle's gap is the label's own, recall is binned by it, and seed 777 is refused."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import load_bench_script


@pytest.fixture(scope="module")
def recall():
    return load_bench_script("lead_recall")


def test_the_gap_bins_cover_the_labels_range_and_nothing_else(recall):
    assert recall.bin_label(-0.5) == "0-5 m" and recall.bin_label(5.0) == "0-5 m" and recall.bin_label(5.01) == "5-10 m"
    assert recall.bin_label(40.0) == "30-40 m"
    for bad in (-1.0, 40.5, float("nan")):
        with pytest.raises(ValueError, match="outside the label's range"):
            recall.bin_label(bad)


def test_summary_counts_recall_by_gap_and_motion_and_false_alarms(recall):
    rows = [{"lead": True, "gap_bin": "0-5 m", "lead_v": 0.0, "named": False},
            {"lead": True, "gap_bin": "0-5 m", "lead_v": 3.0, "named": True},
            {"lead": True, "gap_bin": "30-40 m", "lead_v": 6.0, "named": False},
            {"lead": False, "gap_bin": None, "lead_v": None, "named": True},
            {"lead": False, "gap_bin": None, "lead_v": None, "named": False}]
    s = recall.summarise(rows)
    assert s["by_gap"]["0-5 m"] == {"n": 2, "named": 1, "recall": 0.5}
    assert s["by_gap"]["30-40 m"]["recall"] == 0.0 and s["by_gap"]["10-20 m"]["recall"] is None
    assert s["by_motion"]["standing"]["n"] == 1 and s["by_motion"]["moving"]["named"] == 1
    assert s["recall"] == pytest.approx(1 / 3) and s["false_alarms"] == {"n": 2, "named": 1, "rate": 0.5}


def test_it_plans_every_anchor_against_the_label_and_refuses_the_held_out_seed(recall, tmp_path):
    from ddrive_ros.sim.labels import lead_vehicle
    from ddrive_ros.sim.world import Episode

    # a validation episode with a lead vehicle somewhere in it, found through the label's own rule
    out = tmp_path / "lead.json"
    assert recall.main(["--seed", "31", "--episodes", "6", "--json", str(out), "--png", str(tmp_path / "r.png")]) == 0
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert rows and (tmp_path / "r.png").stat().st_size > 0
    with_lead = [r for r in rows if r["lead"]]
    assert with_lead, "seed 31's first 6 episodes should hold a lead vehicle"
    r = with_lead[0]
    ep = Episode(r["episode_seed"], 12.0)
    k = int(np.argmin(np.abs(ep.t - r["t0"])))
    agent, gap = lead_vehicle(ep, k)
    assert agent >= 0 and gap == pytest.approx(r["gap_m"], abs=0.01) and recall.bin_label(gap) == r["gap_bin"]
    assert doc["summary"]["with_lead"] == len(with_lead)
    with pytest.raises(ValueError, match="held-out seed"):
        recall.main(["--seed", "777", "--episodes", "1"])
