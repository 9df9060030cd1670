"""Checkpoint folders: round trip through safetensors; every missing or mismatched file is an error naming it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.observation import Observation
from ddrive_ros.planner import Planner, PlannerOptions


@pytest.fixture()
def saved(tmp_path):
    bundle = ckpt.build_random("tiny", "trajectory_only", seed=4)
    return bundle, ckpt.save(bundle, tmp_path / "ck")


def test_round_trip_keeps_weights_and_plans(saved):
    bundle, path = saved
    again = ckpt.load(path)
    for (k, a), (_, b) in zip(bundle.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(a, b), k
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), speed=5.0, accel=0.0, yaw_rate=0.0,
                      past_xy=np.stack([np.linspace(-10, -2.5, 4), np.zeros(4)], 1))
    p1 = Planner(bundle, PlannerOptions(decoder="speculative")).plan(obs)
    p2 = Planner.from_checkpoint(path, decoder="speculative").plan(obs)
    assert np.array_equal(p1.waypoints, p2.waypoints)
    assert p2.trajectory.shape == (20, 5) and p2.stats.forwards > 1


def test_a_moved_trajectory_survives_the_round_trip_and_a_bad_shift_is_refused(tmp_path):
    from ddrive_ros.model.config import ModelConfig

    bundle = ckpt.build_random("tiny", "fast_ddrive_bins", seed=4, action_after_prompt=True)
    again = ckpt.load(ckpt.save(bundle, tmp_path / "moved"))
    assert again.config.action_rope_shift == bundle.config.action_rope_shift > 0
    assert again.model.backbone.action_rope_shift == bundle.config.action_rope_shift
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="action_rope_shift"):
            ModelConfig.from_dict({**bundle.config.to_dict(), "action_rope_shift": bad})
    # a shift past the trajectory's start would move it into the prompt: the config file is named
    doc = yaml.safe_load((tmp_path / "moved" / "config.yaml").read_text())
    doc["model"]["action_rope_shift"] = bundle.config.action_rope_shift + 1
    (tmp_path / "moved" / "config.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ckpt.CheckpointError, match=r"config\.yaml says action_rope_shift"):
        ckpt.load(tmp_path / "moved")


@pytest.mark.parametrize("name", ["model.safetensors", "config.yaml", "tokenizer.json", "schema.yaml"])
def test_a_missing_file_is_named(saved, name):
    _, path = saved
    (path / name).unlink()
    with pytest.raises(ckpt.CheckpointError, match=name.replace(".", r"\.")):
        ckpt.load(path)


def test_a_tokenizer_from_another_schema_is_a_mismatch(saved, tmp_path):
    _, path = saved
    other = ckpt.save(ckpt.build_random("tiny", "fast_ddrive"), tmp_path / "other")
    (path / "tokenizer.json").write_text((other / "tokenizer.json").read_text())
    with pytest.raises(ckpt.CheckpointError, match="tokenizer.json"):
        ckpt.load(path)


def test_corrupt_or_wrongly_shaped_weights_are_errors_naming_the_file(saved, tmp_path):
    _, path = saved
    (path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ckpt.CheckpointError, match="model.safetensors"):
        ckpt.load(path)
    # weights of a different model config under this config
    other = ckpt.save(ckpt.build_random("tiny", "trajectory_only"), tmp_path / "o")
    cfg = json.loads(json.dumps(__import__("yaml").safe_load((other / "config.yaml").read_text())))
    cfg["model"]["backbone"]["dim"] = 96
    (other / "config.yaml").write_text(__import__("yaml").safe_dump(cfg))
    with pytest.raises(ckpt.CheckpointError, match="does not match"):
        ckpt.load(other)


def test_an_unknown_checkpoint_name_is_a_clear_error():
    with pytest.raises(ckpt.CheckpointError, match="not found"):
        ckpt.load("no_such_model")


def test_invalid_observations_are_refused_with_a_reason(saved):
    bundle, _ = saved
    planner = Planner(bundle)
    good = dict(images=np.zeros((2, 3, 96, 160, 3), np.uint8), speed=5.0, accel=0.0, yaw_rate=0.0,
                past_xy=np.zeros((4, 2)))
    for bad, msg in ((dict(speed=float("nan")), "non-finite"), (dict(images=np.zeros((3, 96, 160, 3), np.uint8)), "images"),
                     (dict(nav_command="FLY"), "nav_command")):
        with pytest.raises(ValueError, match=msg):
            planner.plan(Observation(**{**good, **bad}))
