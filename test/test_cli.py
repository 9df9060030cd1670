"""The `ddrive` command: help, make-bag -> extractor round trip, model-info JSON, clear errors."""
from __future__ import annotations

import json
import subprocess
import sys


def ddrive(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ddrive_ros.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_subcommand():
    out = ddrive("--help").stdout
    for sub in ("schema", "model-info", "bench", "make-bag", "train", "eval", "replay", "demo"):
        assert sub in out


def test_make_bag_writes_a_bag_the_extractor_reads_back(tmp_path):
    from ddrive_ros.bags.reader import extract_samples

    res = ddrive("make-bag", "--episodes", "1", "--seed", "3", "--duration", "8", "--out", str(tmp_path / "bag"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "bag" / "metadata.yaml").is_file()
    samples, report = extract_samples(tmp_path / "bag", progress=False)
    assert len(samples) > 0
    s = samples[0]
    assert s.observation.images.shape[:2] == (2, 3) and s.future_xy.shape == (20, 2)
    assert s.has_labels["trajectory"] if "trajectory" in s.has_labels else True


def test_model_info_reports_the_base_model_in_range():
    res = ddrive("model-info", "--config", "base-0.8b", "--json")
    assert res.returncode == 0, res.stderr
    counts = json.loads(res.stdout)
    assert 0.75e9 <= counts["total_params"] <= 0.85e9
    assert set(counts) == {"vision_params", "backbone_params", "action_expert_params", "total_params"}


def test_unknown_names_are_clear_errors_not_tracebacks():
    res = ddrive("schema", "--schema", "nope")
    assert res.returncode == 1 and "known schemas" in res.stderr and "Traceback" not in res.stderr
    res = ddrive("model-info", "--config", "nope")
    assert res.returncode == 1 and "known configs" in res.stderr
