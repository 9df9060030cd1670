"""bench/closed_loop_pair.py: two checkpoints on the same closed-loop episode, drawn, and checked against saved runs."""
from __future__ import annotations

import json

import cv2
import pytest

from ddrive_ros.sim.sample import episode_seeds
from conftest import load_bench_script


@pytest.fixture(scope="module")
def pair():
    return load_bench_script("closed_loop_pair")


def test_draws_both_rows_and_refuses_a_saved_run_that_scored_otherwise(pair, tmp_path):
    ep = episode_seeds(31, 3)[2]
    png, out = tmp_path / "pair.png", tmp_path / "pair.json"
    args = ["--checkpoints", "trajectory_only_tiny,trajectory_only_tiny", "--labels", "a,b", "--seed", "31",
            "--episodes", str(ep), "--frames", "2", "--size", "96"]
    assert pair.main(args + ["--png", str(png), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["label"] for r in rows] == ["a", "b"] and all(r["episode_seed"] == ep for r in rows)
    assert rows[0]["pdms"] == rows[1]["pdms"]  # the same weights drive the same episode the same way
    img = cv2.imread(str(png))
    assert img.shape[1] == 2 * 96 and img.shape[0] > 2 * 96  # two views per row, two rows
    # a saved run whose PDMS for this episode differs: an error naming the file, not a picture
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"episodes": [{"method": "speculative", "seed": ep, "pdms": rows[0]["pdms"] + 0.5}]}))
    with pytest.raises(ValueError, match="saved.json"):
        pair.main(args + ["--png", str(tmp_path / "x.png"), "--runs", f"{saved},{saved}"])
    assert not (tmp_path / "x.png").exists()


def test_refuses_an_episode_not_drawn_from_the_seed(pair, tmp_path):
    with pytest.raises(ValueError, match="not among"):
        pair.main(["--checkpoints", "trajectory_only_tiny,trajectory_only_tiny", "--seed", "31", "--episodes", "12345",
                   "--png", str(tmp_path / "x.png")])
    with pytest.raises(ValueError, match="integers"):
        pair.main(["--checkpoints", "trajectory_only_tiny,trajectory_only_tiny", "--episodes", "a,b",
                   "--png", str(tmp_path / "x.png")])
