"""Self targets (training/self_targets.py): the starting model's greedy plans are AR's, they replace only the
trajectory of the rows chosen, and those rows' draft input is the fully masked trajectory."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.dataset import tensorize
from ddrive_ros.training.self_targets import greedy_ids, with_self_targets
from ddrive_ros.training.trainer import TrainConfig, train


@pytest.fixture(scope="module")
def shipped_data():
    from ddrive_ros.sim.sample import samples_from_world

    samples = list(samples_from_world(321, 1, duration_s=8.0, stride_s=1.0, progress=False))[:4]
    bundle = ckpt.load("trajectory_only_tiny")
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    return bundle, layout, tensorize(samples, Codec(layout), bundle.config)


def test_greedy_targets_are_the_ar_plans_and_differ_from_the_expert(shipped_data):
    from ddrive_ros.planner import Planner, PlannerOptions

    bundle, layout, data = shipped_data
    got = greedy_ids(bundle, data, bundle.config.block_size, progress=False)
    traj = torch.as_tensor(layout.editable)
    assert torch.equal(got[:, ~traj], data.ids[:, ~traj])  # the scaffold is the scaffold
    # the AR baseline (block size 1, its own layout) spells the same trajectory from the same inputs
    ar = Planner(bundle, PlannerOptions(decoder="ar", draft_previous=False))
    bos = torch.tensor([bundle.tokenizer.bos_id])
    from ddrive_ros.decoding.block_loop import decode

    for i in range(len(data)):
        prompt = ar.backend.prompt(data.images[i:i + 1], data.ego[i:i + 1], bos, data.nav[i:i + 1])
        ids, _ = decode(ar.backend, ar.layout, prompt, ar.strategy)
        ar_xy = ar.codec.decode(ids[0].numpy()).waypoints
        assert np.array_equal(Codec(layout).decode(got[i].numpy()).waypoints, ar_xy), i
    # a model's own plan is not the expert's future token for token (else the targets would add nothing)
    assert (got[:, traj] != data.ids[:, traj]).any()


def test_self_targets_replace_only_the_chosen_rows_trajectory(shipped_data):
    bundle, layout, data = shipped_data
    from ddrive_ros.training.losses import DualStreamLoss

    loss = DualStreamLoss(layout, bundle.config.prompt_len)
    other = data.ids.clone()
    other[:, loss.trajectory] = torch.roll(other[:, loss.trajectory], 1, 0)
    rows = torch.arange(len(data)) % 2 == 0
    assert rows.any() and not rows.all()
    mixed = with_self_targets(data.ids, data.labelled, other, loss.trajectory, rows)
    assert torch.equal(mixed[~rows], data.ids[~rows])
    assert torch.equal(mixed[rows][:, loss.trajectory], other[rows][:, loss.trajectory])
    assert torch.equal(mixed[rows][:, ~loss.trajectory], data.ids[rows][:, ~loss.trajectory])


def test_draft_rows_learn_from_a_fully_masked_trajectory(shipped_data):
    from ddrive_ros.runtime.torch_backend import images_to_input
    from ddrive_ros.training.losses import DualStreamLoss

    bundle, layout, data = shipped_data
    images, ego, nav, ids, labelled = data.batch(torch.arange(len(data)))
    model = bundle.model
    with torch.no_grad():
        prompt = model.prompt_embeds(model.encode_images(images_to_input(images, torch.float32)), ego,
                                     torch.full_like(nav, bundle.tokenizer.bos_id), nav)
        loss = DualStreamLoss(layout, bundle.config.prompt_len)
        rows = torch.ones(len(data), dtype=torch.bool)
        # the diffusion term of fully masked rows is the one-forward draft's loss, the same whatever the seed
        a = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), draft_rows=rows)
        b = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(1), draft_rows=rows)
        c = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(1))
    assert abs(a.diffusion - b.diffusion) < 1e-5
    assert abs(c.diffusion - b.diffusion) > 1e-4  # random partial masks otherwise


def test_self_targets_need_their_ids_and_a_share_in_range(shipped_data, tmp_path):
    bundle, _, data = shipped_data
    cfg = TrainConfig(model="tiny", schema="trajectory_only", out=str(tmp_path / "m"), steps=2, batch_size=2,
                      warmup=1, curriculum=[[16, 1.0]], save_every=0, self_targets=0.5)
    with pytest.raises(ValueError, match="self_ids"):
        train(cfg, data, ckpt.load("trajectory_only_tiny"), resume=False, progress=False)
    cfg.self_targets = 1.5
    with pytest.raises(ValueError, match="self_targets"):
        train(cfg, data, ckpt.load("trajectory_only_tiny"), resume=False, progress=False)
