"""bench/model_size.py: plan and training-step cost by model size, and the `small` config it measures."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddrive_ros.model.config import ModelConfig
from ddrive_ros.model.vla import DrivingVLA

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("model_size", REPO / "bench" / "model_size.py")
model_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model_size)


def params(config: str) -> int:
    cfg = ModelConfig.load(config).with_output(823, 54, 16)
    return sum(p.numel() for p in DrivingVLA(cfg).parameters())


def test_small_sits_between_tiny_and_base():
    tiny, small = params("tiny"), params("small")
    assert 2.5 * tiny < small < 5 * tiny
    cfg = ModelConfig.load("small")
    assert cfg.vision.image_size == ModelConfig.load("tiny").vision.image_size  # the shipped cameras' size
    assert cfg.backbone.head_dim % 2 == 0


@pytest.mark.parametrize("factor", [1.5, 2.0, 3.0])
def test_widened_keeps_heads_whole_and_even(factor, tmp_path):
    import yaml

    base = yaml.safe_load((REPO / "config" / "model" / "small.yaml").read_text())
    d = model_size.widened(base, factor, "w")
    b, v = d["backbone"], d["vision"]
    assert b["dim"] % (2 * b["heads"]) == 0 and v["dim"] % (2 * v["heads"]) == 0
    assert b["dim"] > base["backbone"]["dim"] and b["ffn_hidden"] > base["backbone"]["ffn_hidden"]
    assert b["layers"] == base["backbone"]["layers"]  # width only
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(d))
    assert params(str(path)) > params("small")


def test_bench_measures_one_size_and_replots_from_json(tmp_path):
    out, png = tmp_path / "size.json", tmp_path / "size.png"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "bench/model_size.py", "--configs", "tiny", "--iters", "1", "--plans", "1",
                           "--train-iters", "1", "--json", str(out), "--plot", str(png)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| tiny | 2." in proc.stdout and "fits node period" in proc.stdout
    res = json.loads(out.read_text())
    (row,) = res["rows"]
    for schema in model_size.SCHEMAS:
        r = row[schema]
        assert r["train_step_ms"] > 0 and r["train_steps_in_90_min"] == int(90 * 60 / (r["train_step_ms"] / 1e3))
        for kind in model_size.BACKENDS:
            k = r[kind]
            # the estimate is vision + prefill + the block forwards scaled to the shipped model's count
            assert k["plan_ms_at_shipped_forwards"] > k["vision_ms"] + k["prefill_ms"]
            assert k["random_weights_forwards"] > 0
    assert png.stat().st_size > 10_000
    again = subprocess.run([sys.executable, "bench/model_size.py", "--from-json", str(out)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "| tiny |" in again.stdout


@pytest.mark.parametrize("args, message", [
    (["--configs", "no_such_model"], "no model config at"),
    (["--configs", "tiny*wide"], "width factor"),
    (["--forwards", "trajectory_only=8"], "no count for ['fast_ddrive_bins']"),
    (["--forwards", "fast_ddrive=30,trajectory_only=8"], "unknown schema 'fast_ddrive'"),
])
def test_bench_refuses_bad_arguments_by_name(args, message):
    with pytest.raises(SystemExit) as err:
        model_size.main(args)
    assert message in str(err.value)
