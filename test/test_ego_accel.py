"""A model configured not to read the ego's acceleration (`ego_accel: false`) gets the same features, and so
the same plan, whatever acceleration is measured; training builds its features the same way; the flag is saved
with the checkpoint and a wrong value is refused naming the file."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.commands.train import set_ego_accel
from ddrive_ros.model.config import ModelConfig


def _obs(accel: float):
    from ddrive_ros.observation import Observation

    past = np.stack([-np.arange(4, 0, -1) * 3.0, np.zeros(4)], 1)
    return Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=past, speed=6.0, accel=accel,
                       yaw_rate=0.0, nav_command="FOLLOW_LANE", stamp=1.0)


def test_a_model_that_does_not_read_acceleration_plans_the_same_whatever_is_measured():
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    bundle = ckpt.build_random("tiny", "trajectory_only", seed=5)
    reads = Planner(bundle, PlannerOptions(draft_previous=False, draft_kinematic=False))
    ego = [reads._ego(_obs(a)) for a in (-4.0, 3.0)]
    assert not torch.equal(ego[0], ego[1])  # by default the acceleration is an input
    set_ego_accel(bundle, False)
    blind = Planner(bundle, PlannerOptions(draft_previous=False, draft_kinematic=False))
    ego = [blind._ego(_obs(a)) for a in (-4.0, 3.0)]
    assert torch.equal(ego[0], ego[1]) and float(ego[0][0, 1]) == 0.0
    ids = [blind.plan_and_ids(_obs(a))[1] for a in (-4.0, 3.0)]
    assert np.array_equal(ids[0], ids[1])


def test_training_features_follow_the_model_config():
    from ddrive_ros.training.dataset import observation_tensors

    cfg = ModelConfig.load("tiny")
    _, on, _ = observation_tensors([_obs(2.0)], cfg)
    _, off, _ = observation_tensors([_obs(2.0)], dataclasses.replace(cfg, ego_accel=False))
    assert float(on[0, 1]) != 0.0 and float(off[0, 1]) == 0.0
    assert torch.equal(torch.cat([on[:, :1], on[:, 2:]], 1), torch.cat([off[:, :1], off[:, 2:]], 1))


def test_the_flag_is_saved_with_the_checkpoint_and_a_wrong_value_is_refused(tmp_path):
    bundle = ckpt.build_random("tiny", "trajectory_only")
    set_ego_accel(bundle, False)
    ckpt.save(bundle, tmp_path / "m")
    assert ckpt.load(tmp_path / "m").config.ego_accel is False
    doc = yaml.safe_load((tmp_path / "m" / "config.yaml").read_text())
    doc["model"]["ego_accel"] = "no"
    (tmp_path / "m" / "config.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ckpt.CheckpointError, match="ego_accel"):
        ckpt.load(tmp_path / "m")
    assert ModelConfig.from_dict({}).ego_accel is True  # checkpoints from before the flag read acceleration


def test_accel_clip_clamps_what_the_model_reads_to_its_range_and_leaves_values_inside_alone():
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    bundle = ckpt.build_random("tiny", "trajectory_only", seed=5)
    plain = Planner(bundle, PlannerOptions(draft_previous=False, draft_kinematic=False))
    clipped = Planner(bundle, PlannerOptions(draft_previous=False, draft_kinematic=False, accel_clip=(-2.0, 1.5)))
    # saturated controller values read as the range's ends
    assert torch.equal(clipped._ego(_obs(3.0)), plain._ego(_obs(1.5)))
    assert torch.equal(clipped._ego(_obs(-6.0)), plain._ego(_obs(-2.0)))
    assert not torch.equal(plain._ego(_obs(3.0)), plain._ego(_obs(1.5)))
    # inside the range nothing changes
    assert torch.equal(clipped._ego(_obs(0.7)), plain._ego(_obs(0.7)))
    ids = [clipped.plan_and_ids(_obs(a))[1] for a in (1.5, 3.0)]
    assert np.array_equal(ids[0], ids[1])


@pytest.mark.parametrize("clip", [(1.0, -1.0), (0.5, 0.5), (1.0,)])
def test_a_malformed_accel_clip_is_refused(clip):
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    with pytest.raises(ValueError, match="accel_clip"):
        Planner(ckpt.build_random("tiny", "trajectory_only"), PlannerOptions(accel_clip=clip))


def test_the_cli_reads_accel_clip_and_refuses_a_bad_one():
    import argparse

    from ddrive_ros.commands.sim import accel_clip

    assert accel_clip("-2,1.5") == (-2.0, 1.5)
    for bad in ("1.5,-2", "2", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError, match="--accel-clip"):
            accel_clip(bad)
