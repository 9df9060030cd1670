"""bench/collision_kinds.py: the shipped model's at-fault contacts on a validation run, driven again and described."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_bench_script

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = str(ROOT / "candidates" / "fast_ddrive_bins_tiny_dagger")  # round 13: the shipped model when the saved run drove
SAVED = ROOT / "bench" / "results" / "sim_60_val31_fast_ddrive_dagger_bins.json"
EPISODE = 2121125069  # rear-ends a vehicle standing at an intersection (bench/results/collision_kinds_val6.json)


@pytest.fixture(scope="module")
def kinds():
    return load_bench_script("collision_kinds")


def one_episode_run(tmp_path: Path, pdms_shift: float = 0.0) -> Path:
    data = json.loads(SAVED.read_text())
    eps = [dict(e) for e in data["episodes"] if e["seed"] == EPISODE and e["method"] == "speculative"]
    assert len(eps) == 1 and eps[0]["at_fault_collisions"] == 1
    eps[0]["pdms"] += pdms_shift
    out = tmp_path / "one_val31.json"
    out.write_text(json.dumps({"config": data["config"], "episodes": eps, "rows": []}))
    return out


def test_drives_the_saved_collision_again_and_describes_it(kinds, tmp_path):
    import cv2

    out, png = tmp_path / "kinds.json", tmp_path / "kinds.png"
    assert kinds.main(["--checkpoint", CHECKPOINT, "--runs", str(one_episode_run(tmp_path)),
                       "--json", str(out), "--png", str(png), "--size", "96"]) == 0
    (c,) = json.loads(out.read_text())["contacts"]
    assert c["episode_seed"] == EPISODE and c["how"] == "rear-end" and c["kind"] == "vehicle"
    assert c["in_path_s"] > 2.0 and c["ego_v"] > c["expert_v_same_t"]  # a road user in view, approached too fast
    assert 0.2 <= c["last_plan_observed_s_before"] <= 0.45 and 0.0 < c["gap_at_last_plan_m"] < 5.0
    assert isinstance(c["last_plan_lead_vehicle"], bool)
    img = cv2.imread(str(png))
    assert img.shape[0] > 96 and img.shape[1] == 2 * 160 + 96  # two front camera frames beside the bird's-eye view
    assert c["early_plan_observed_s_before"] >= 1.5 and c["early_gap_m"] > c["gap_at_last_plan_m"]


def test_refuses_a_run_that_scored_otherwise_and_the_held_out_seed(kinds, tmp_path):
    with pytest.raises(ValueError, match="saved"):
        kinds.main(["--checkpoint", CHECKPOINT, "--runs", str(one_episode_run(tmp_path, pdms_shift=0.25))])
    data = json.loads(SAVED.read_text())
    data["config"]["seed"] = 777
    held = tmp_path / "held_val.json"
    held.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="held-out seed 777"):
        kinds.main(["--runs", str(held)])
    with pytest.raises(ValueError, match="only validation runs"):
        kinds.main(["--runs", str(SAVED.with_name("sim_100_fast_ddrive_dagger_bins.json"))])
