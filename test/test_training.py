"""Training smoke test: a few dozen dual-stream steps on a handful of world samples make the loss fall;
the state resumes from safetensors; the curriculum and schedule behave."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.dataset import tensorize
from ddrive_ros.training.masks import dual_stream_mask
from ddrive_ros.training.trainer import TrainConfig, block_size_at, lr_at, stage_boundaries, train


@pytest.fixture(scope="module")
def world_samples():
    from ddrive_ros.sim.sample import samples_from_world

    return list(samples_from_world(123, 1, duration_s=8.0, stride_s=1.0, progress=False))[:6]


def test_a_few_dozen_steps_make_the_loss_fall(world_samples, tmp_path):
    cfg = TrainConfig(model="tiny", schema="trajectory_only", out=str(tmp_path / "m"), steps=40, batch_size=6, lr=3e-3,
                      warmup=5, curriculum=[[1, 0.2], [4, 0.3], [16, 0.5]], save_every=20, seed=0)
    bundle = ckpt.build_random("tiny", "trajectory_only", block_size=16)
    data = tensorize(world_samples, Codec(Layout(bundle.schema, bundle.tokenizer, 16)), bundle.config)
    bundle, history = train(cfg, data, bundle, resume=False, progress=False)
    first = np.mean([h["loss"] for h in history[:5]])
    last = np.mean([h["loss"] for h in history[-5:]])
    assert last < 0.7 * first, (first, last)
    assert {h["block_size"] for h in history} == {1, 4, 16}
    # a resumable state was written as safetensors, and resuming continues from it
    assert (tmp_path / "m" / "train_state" / "optimizer.safetensors").is_file()
    cfg.steps = 44
    _, resumed = train(cfg, data, ckpt.build_random("tiny", "trajectory_only", block_size=16), resume=True, progress=False)
    assert resumed[0]["step"] == 0 and resumed[-1]["step"] == 43 and len(resumed) == 44


def test_full_schema_trains_with_sections_weighted_and_unlabelled_sections_left_out(world_samples):
    bundle = ckpt.build_random("tiny", "fast_ddrive")
    codec = Codec(Layout(bundle.schema, bundle.tokenizer, 32))
    for s in world_samples[:2]:
        s.has_labels = {**s.has_labels, "explanation": False}
    data = tensorize(world_samples[:2], codec, bundle.config)
    expl = torch.as_tensor(codec.layout.section == 1)
    assert not data.labelled[:, expl].any() and data.labelled[:, ~expl & torch.as_tensor(codec.layout.editable)].all()


def test_dual_stream_mask_is_causal_for_clean_and_block_bidirectional_for_noisy():
    bundle = ckpt.build_random("tiny", "trajectory_only", block_size=8)
    layout = Layout(bundle.schema, bundle.tokenizer, 8)
    p, n = 5, layout.length
    mask, pos = dual_stream_mask(p, layout)
    assert torch.equal(mask[: p + n, : p + n], torch.tril(torch.ones(p + n, p + n, dtype=torch.bool)))
    assert not mask[: p + n, p + n:].any()  # the clean stream never sees noise
    b0, b1 = layout.blocks[0], layout.blocks[1]
    row = p + n + b0.start
    assert mask[row, p + n + b0.end - 1] and not mask[row, p + n + b0.end]  # whole own block, nothing after
    row = p + n + b1.start
    assert mask[row, p + b1.start - 1] and not mask[row, p + b1.start]  # clean tokens before the block only
    assert mask[row, :p].all()
    assert torch.equal(pos[p + n:], pos[p:p + n])


def test_schedule_warms_up_then_decays_and_curriculum_grows_block_size():
    cfg = TrainConfig(steps=100, warmup=10, lr=1e-3, min_lr=1e-5)
    assert lr_at(0, cfg) < lr_at(9, cfg) <= cfg.lr
    assert lr_at(99, cfg) < lr_at(50, cfg) < lr_at(10, cfg)
    stages = stage_boundaries(cfg)
    sizes = [block_size_at(s, stages) for s in range(100)]
    assert sizes == sorted(sizes) and sizes[0] == 1 and sizes[-1] == 32


def test_trainable_patterns_freeze_everything_else_and_a_typo_is_an_error(world_samples, tmp_path):
    """Training only the Action Expert leaves every other weight bit for bit as it was, so the sections
    before the trajectory (predicted by frozen weights) cannot change."""
    bundle = ckpt.build_random("tiny", "fast_ddrive", block_size=32, seed=1)
    before = {n: p.detach().clone() for n, p in bundle.model.named_parameters()}
    data = tensorize(world_samples, Codec(Layout(bundle.schema, bundle.tokenizer, 32)), bundle.config)
    cfg = TrainConfig(model="tiny", schema="fast_ddrive", out=str(tmp_path / "m"), steps=3, batch_size=4, lr=3e-3,
                      warmup=1, curriculum=[[32, 1.0]], save_every=0, repair=0.5, repair_own=0.5,
                      trainable=["backbone.layers.*.action_ffn.*", "backbone.action_head.*"])
    bundle, _ = train(cfg, data, bundle, resume=False, progress=False)
    changed = {n for n, p in bundle.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".action_ffn." in n or n.startswith("backbone.action_head.") for n in changed), changed
    cfg.trainable = ["backbone.action_expert.*"]
    with pytest.raises(ValueError, match="matches no parameter"):
        train(cfg, data, ckpt.build_random("tiny", "fast_ddrive", block_size=32), resume=False, progress=False)


def test_own_drafts_replace_only_labelled_trajectory_tokens_with_allowed_tokens(world_samples):
    from ddrive_ros.runtime.torch_backend import images_to_input
    from ddrive_ros.training.losses import DualStreamLoss

    bundle = ckpt.load("trajectory_only_tiny")
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    data = tensorize(world_samples, Codec(layout), bundle.config)
    images, ego, nav, ids, labelled = data.batch(torch.arange(min(4, len(data))))
    model = bundle.model
    with torch.no_grad():
        prompt = model.prompt_embeds(model.encode_images(images_to_input(images, torch.float32)), ego,
                                     torch.full_like(nav, bundle.tokenizer.bos_id), nav)
    loss = DualStreamLoss(layout, bundle.config.prompt_len, bin_sigma=1.5)
    gen = torch.Generator().manual_seed(0)
    sampled = loss.own_drafts(model, prompt, ids, labelled, gen, temperature=1.0)
    greedy = loss.own_drafts(model, prompt, ids, labelled, gen, temperature=0.0)
    in_traj = loss.trajectory[None] & labelled
    for drafts in (sampled, greedy):
        assert torch.equal(drafts[~in_traj], ids[~in_traj])  # scaffold and everything else untouched
        assert loss.allowed[torch.arange(ids.shape[1])[None].expand_as(ids)[in_traj], drafts[in_traj]].all()
    # a trained model's greedy draft is close to the expert; sampling at T=1 makes more (and other) errors
    assert (greedy[in_traj] != ids[in_traj]).float().mean() < (sampled[in_traj] != ids[in_traj]).float().mean()


def test_soft_targets_anneal_to_one_hot_and_balancing_evens_out_navigation_commands():
    from ddrive_ros.training.trainer import bin_sigma_at, sampling_weights

    cfg = TrainConfig(steps=100, bin_sigma=1.5, anneal=[0.5, 0.0])
    assert bin_sigma_at(0, cfg) == bin_sigma_at(50, cfg) == 1.5
    assert 0.0 < bin_sigma_at(75, cfg) < 1.5 and bin_sigma_at(99, cfg) == 0.0
    with pytest.raises(ValueError, match="anneal"):
        bin_sigma_at(0, TrainConfig(anneal=[1.5, 0.0]))
    nav = torch.tensor([0] * 80 + [1] * 15 + [2] * 5)  # follow lane, turn, lane change
    assert sampling_weights(nav, 0.0) is None
    w = sampling_weights(nav, 1.0)
    assert torch.allclose(torch.stack([w[nav == k].sum() for k in range(3)]), torch.full((3,), 1 / 3, dtype=w.dtype))
    half = sampling_weights(nav, 0.5)
    assert abs(float(half.sum()) - 1.0) < 1e-9 and half[nav == 2].sum() > 0.05 * 1.5


def test_surprise_sampling_draws_what_constant_velocity_does_not_predict():
    from types import SimpleNamespace

    from ddrive_ros.evaluation.metrics import constant_velocity_prediction
    from ddrive_ros.training.dataset import cv_surprise
    from ddrive_ros.training.trainer import sampling_weights

    times = 0.5 * np.arange(1, 11)
    fine_t = np.linspace(0.0, 6.0, 61)

    def sample(future_xy, speed=8.0, yaw_rate=0.1):
        return SimpleNamespace(future_times=fine_t, future_xy=future_xy,
                               observation=SimpleNamespace(speed=speed, yaw_rate=yaw_rate))

    cruising = sample(constant_velocity_prediction(8.0, 0.1, fine_t))
    assert cv_surprise(cruising, times) < 1e-6
    braking = sample(np.column_stack([8.0 * fine_t - 0.5 * fine_t ** 2, np.zeros_like(fine_t)]), yaw_rate=0.0)
    expected = np.mean(0.5 * times ** 2)  # x falls behind v t by a t^2 / 2 with a = 1 m/s^2
    assert abs(cv_surprise(braking, times) - expected) < 1e-6

    nav = torch.zeros(4, dtype=torch.long)
    surprise = torch.tensor([0.0, 0.0, 2.0, 20.0])
    w = sampling_weights(nav, 0.0, surprise, 1.0, surprise_cap=6.0)
    assert torch.allclose(w, torch.tensor([0.0, 0.0, 0.25, 0.75], dtype=w.dtype))  # 20 m counts as the cap
    mixed = sampling_weights(nav, 0.5, surprise, 0.25)
    assert abs(float(mixed.sum()) - 1.0) < 1e-9 and mixed[0] == mixed[1] > 0
    with pytest.raises(ValueError, match="sum to <= 1"):
        sampling_weights(nav, 0.8, surprise, 0.3)
    with pytest.raises(ValueError, match="one surprise value per sample"):
        sampling_weights(nav, 0.0, None, 0.5)


def test_brake_sampling_draws_the_futures_that_slow_down():
    from types import SimpleNamespace

    from ddrive_ros.training.dataset import brake_share
    from ddrive_ros.training.trainer import sampling_weights

    t = np.linspace(0.1, 5.0, 50)

    def sample(x, speed):
        return SimpleNamespace(future_times=t, future_xy=np.column_stack([x, np.zeros_like(x)]),
                               observation=SimpleNamespace(speed=speed))

    assert brake_share(sample(8.0 * t, 8.0)) < 1e-6  # cruising
    assert brake_share(sample(8.0 * t + 0.5 * t ** 2, 8.0)) == 0.0  # speeding up never counts
    stop = np.minimum(8.0 * t - 0.8 * t ** 2, 20.0)  # 8 m/s to standstill at t = 5 s
    assert abs(brake_share(sample(stop, 8.0)) - 1.0) < 0.05
    assert abs(brake_share(sample(8.0 * t - 0.4 * t ** 2, 8.0)) - 0.5) < 0.05  # half the speed shed by 5 s
    assert brake_share(sample(np.full_like(t, 0.2), 0.3)) == 1.0  # a crawl that stops: the 1 m/s floor
    with pytest.raises(ValueError, match="future_times must increase"):
        brake_share(SimpleNamespace(future_times=t[::-1], future_xy=np.zeros((50, 2)), observation=SimpleNamespace(speed=1.0)))

    nav = torch.zeros(4, dtype=torch.long)
    slowdown = torch.tensor([0.0, 0.0, 0.25, 0.75])
    w = sampling_weights(nav, 0.0, slowdown=slowdown, brake_share=1.0)
    assert torch.allclose(w, torch.tensor([0.0, 0.0, 0.25, 0.75], dtype=w.dtype))
    mixed = sampling_weights(nav, 0.25, torch.ones(4), 0.25, slowdown=slowdown, brake_share=0.25)
    assert abs(float(mixed.sum()) - 1.0) < 1e-9 and mixed[3] > mixed[2] > mixed[1] == mixed[0] > 0
    with pytest.raises(ValueError, match="sum to <= 1"):
        sampling_weights(nav, 0.5, torch.ones(4), 0.3, slowdown=slowdown, brake_share=0.3)
    with pytest.raises(ValueError, match="one brake value per sample"):
        sampling_weights(nav, 0.0, brake_share=0.5)
    with pytest.raises(ValueError, match="no sample's future slows down"):
        sampling_weights(nav, 0.0, slowdown=torch.zeros(4), brake_share=0.5)


def test_start_sampling_draws_the_standing_samples_whose_future_gets_going():
    from types import SimpleNamespace

    from ddrive_ros.training.dataset import START_FULL_MPS, start_share
    from ddrive_ros.training.trainer import sampling_weights

    t = np.linspace(0.1, 5.0, 50)

    def sample(x, speed):
        return SimpleNamespace(future_times=t, future_xy=np.column_stack([x, np.zeros_like(x)]),
                               observation=SimpleNamespace(speed=speed))

    pull = 0.5 * 1.5 * t ** 2  # 1.5 m/s^2 from standstill: 7.5 m/s at 5 s
    assert start_share(sample(pull, 0.0)) == 1.0
    assert abs(start_share(sample(0.5 * 0.4 * t ** 2, 0.2)) - 2.0 / START_FULL_MPS) < 0.05  # 2 m/s by 5 s: half
    assert start_share(sample(np.zeros_like(t), 0.0)) == 0.0  # waits on
    assert start_share(sample(8.0 * t + pull, 8.0)) == 0.0  # already moving: not a start
    with pytest.raises(ValueError, match="future_times must increase"):
        start_share(SimpleNamespace(future_times=t[::-1], future_xy=np.zeros((50, 2)), observation=SimpleNamespace(speed=0.0)))

    nav = torch.zeros(4, dtype=torch.long)
    going = torch.tensor([0.0, 1.0, 0.0, 0.5])
    w = sampling_weights(nav, 0.0, pull_away=going, start_share=1.0)
    assert torch.allclose(w, torch.tensor([0.0, 2 / 3, 0.0, 1 / 3], dtype=w.dtype))
    both = sampling_weights(nav, 0.0, slowdown=torch.tensor([1.0, 0.0, 0.0, 0.0]), brake_share=0.3, pull_away=going,
                            start_share=0.3)
    assert torch.allclose(both, torch.tensor([0.4, 0.3, 0.1, 0.2], dtype=both.dtype))  # 0.1 uniform each + 0.3 + 0.3
    with pytest.raises(ValueError, match="one start value per sample"):
        sampling_weights(nav, 0.0, start_share=0.5)
    with pytest.raises(ValueError, match="no standing sample's future gets going"):
        sampling_weights(nav, 0.0, pull_away=torch.zeros(4), start_share=0.5)


def test_recover_sampling_draws_the_braking_samples_whose_future_drives_on():
    from types import SimpleNamespace

    from ddrive_ros.training.dataset import RECOVER_FULL_MPS, recover_share
    from ddrive_ros.training.trainer import sampling_weights

    t = np.linspace(0.1, 5.0, 50)

    def sample(x, speed, accel):
        return SimpleNamespace(future_times=t, future_xy=np.column_stack([x, np.zeros_like(x)]),
                               observation=SimpleNamespace(speed=speed, accel=accel))

    on = 3.0 * t + 0.5 * 1.0 * t ** 2  # 3 m/s, then 1 m/s^2: 8 m/s at 5 s
    assert recover_share(sample(on, 3.0, -2.0)) == 1.0  # braked hard, drives on
    assert abs(recover_share(sample(3.0 * t + 0.5 * 0.2 * t ** 2, 3.0, -1.0)) - 1.0 / RECOVER_FULL_MPS) < 0.05
    assert recover_share(sample(on, 3.0, 0.0)) == 0.0  # not braking now: a plain speed-up
    assert recover_share(sample(1.0 * t + 0.5 * 1.0 * t ** 2, 1.0, -1.0)) == 0.0  # near a halt: start_share's case
    assert recover_share(sample(np.minimum(3.0 * t - 0.6 * t ** 2, 3.75), 3.0, -1.0)) == 0.0  # slows on to a stop
    assert recover_share(sample(3.0 * t, 3.0, -1.0)) < 1e-9  # holds its speed: nothing to recover
    nav = torch.zeros(3, dtype=torch.long)
    w = sampling_weights(nav, 0.0, recovery=torch.tensor([0.0, 1.0, 0.0]), recover_share=0.5)
    assert torch.allclose(w, torch.tensor([1 / 6, 1 / 6 + 0.5, 1 / 6], dtype=w.dtype))
    with pytest.raises(ValueError, match="one recover value per sample"):
        sampling_weights(nav, 0.0, recover_share=0.5)
    with pytest.raises(ValueError, match="no braking sample's future drives on"):
        sampling_weights(nav, 0.0, recovery=torch.zeros(3), recover_share=0.5)


def test_camera_augmentation_jitters_and_shifts_each_camera_the_same_way_in_both_frames():
    from ddrive_ros.training.augment import CameraAugment

    assert CameraAugment.from_dict({}) is None
    with pytest.raises(ValueError, match="unknown augment keys"):
        CameraAugment.from_dict({"hue": 0.1})
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 6, 24, 40, 3), generator=g, dtype=torch.uint8)
    images[:, 3:] = images[:, :3]  # the second frame equals the first
    shift = CameraAugment.from_dict({"shift_px": 3})(images, torch.Generator().manual_seed(1))
    assert shift.dtype == torch.uint8 and shift.shape == images.shape and not torch.equal(shift, images)
    assert torch.equal(shift[:, 3:], shift[:, :3])  # same shift per camera in both frames
    photo = CameraAugment.from_dict({"brightness": 0.2, "contrast": 0.2})(images, torch.Generator().manual_seed(1))
    assert not torch.equal(photo, images) and photo.float().std() > 10


def test_ema_weights_are_what_training_returns(world_samples, tmp_path):
    bundle = ckpt.build_random("tiny", "trajectory_only", block_size=16, seed=2)
    start = {n: p.detach().clone() for n, p in bundle.model.named_parameters()}
    data = tensorize(world_samples, Codec(Layout(bundle.schema, bundle.tokenizer, 16)), bundle.config)
    cfg = TrainConfig(model="tiny", schema="trajectory_only", out=str(tmp_path / "m"), steps=4, batch_size=2, lr=3e-3,
                      warmup=1, curriculum=[[16, 1.0]], save_every=0, ema=0.999, balance=0.5, bin_sigma=1.5,
                      anneal=[0.0, 0.0], augment={"shift_px": 2, "brightness": 0.1})
    bundle, history = train(cfg, data, bundle, resume=False, progress=False)
    assert history[0]["bin_sigma"] == 1.5 and history[-1]["bin_sigma"] == 0.0
    # with decay 0.999 the EMA has moved only ~0.4% of the way from the start over 4 steps
    name, p = next((n, p) for n, p in bundle.model.named_parameters() if n.endswith("q.weight"))
    moved = (p - start[name]).abs().max()
    assert 0 < moved < 3e-3 * 4 * 0.01, moved


def test_repair_only_trains_on_the_repair_term_alone(world_samples):
    from ddrive_ros.runtime.torch_backend import images_to_input
    from ddrive_ros.training.losses import DualStreamLoss
    from ddrive_ros.training.perturb import RepairSpec, perturbed_ids

    bundle = ckpt.load("trajectory_only_tiny")
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    codec = Codec(layout)
    data = tensorize(world_samples, codec, bundle.config)
    images, ego, nav, ids, labelled = data.batch(torch.arange(len(data)))
    model = bundle.model
    with torch.no_grad():
        prompt = model.prompt_embeds(model.encode_images(images_to_input(images, torch.float32)), ego,
                                     torch.full_like(nav, bundle.tokenizer.bos_id), nav)
    loss = DualStreamLoss(layout, bundle.config.prompt_len)
    bad = perturbed_ids(ids, codec, RepairSpec(p_progress=1.0, p_heading=0.0, p_both=0.0), np.random.default_rng(0))
    parts = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), repair_ids=bad, repair_only=True)
    assert abs(float(parts.total.detach()) - parts.repair) < 1e-5 and parts.repair > 0
    mixed = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), repair_ids=bad)
    assert abs(float(mixed.total.detach()) - parts.repair) > 1e-4  # the plain terms are in the default total
    with pytest.raises(ValueError, match="repair rows"):
        loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), repair_only=True)


def test_context_swap_gives_rows_another_rows_explanation_unsupervised_and_keeps_the_rest(world_samples):
    """Swapped rows hold a different row's explanation with its loss dropped; the trajectory and the
    meta behaviour after it keep their own tokens and labels; unswapped rows are untouched."""
    from ddrive_ros.training.context_swap import swap_context

    bundle = ckpt.build_random("tiny", "fast_ddrive")
    layout = Layout(bundle.schema, bundle.tokenizer, 32)
    data = tensorize(world_samples, Codec(layout), bundle.config)
    ids, labelled = data.ids, data.labelled
    expl = torch.as_tensor(layout.section == layout.schema.section_names.index("explanation"))
    new_ids, new_lab, rows = swap_context(ids, labelled, layout, ["explanation"], 0.5, torch.Generator().manual_seed(1))
    assert 0 < int(rows.sum()) < len(rows)
    donor = ids.roll(len(ids) // 2, dims=0)
    assert torch.equal(new_ids[rows][:, expl], donor[rows][:, expl])
    assert not new_lab[rows][:, expl].any()
    assert torch.equal(new_ids[:, ~expl], ids[:, ~expl]) and torch.equal(new_lab[:, ~expl], labelled[:, ~expl])
    assert torch.equal(new_ids[~rows], ids[~rows]) and torch.equal(new_lab[~rows], labelled[~rows])
    with pytest.raises(ValueError, match="trajectory"):
        swap_context(ids, labelled, layout, ["trajectory"], 0.5, torch.Generator())
    with pytest.raises(ValueError, match="not sections"):
        swap_context(ids, labelled, layout, ["explanations"], 0.5, torch.Generator())
    assert TrainConfig.from_dict({"context_swap": 0.5}).context_swap_sections == ["explanation"]
    # exclusive: rows that keep their own explanation supervise nothing after it
    ex_ids, ex_lab, ex_rows = swap_context(ids, labelled, layout, ["explanation"], 0.5, torch.Generator().manual_seed(1),
                                           exclusive=True)
    assert torch.equal(ex_rows, rows) and torch.equal(ex_ids, new_ids)
    after = torch.as_tensor(layout.section > layout.schema.section_names.index("explanation"))
    assert not ex_lab[~rows][:, after].any() and torch.equal(ex_lab[rows], new_lab[rows])
    assert torch.equal(ex_lab[~rows][:, ~after], labelled[~rows][:, ~after])


def test_transfer_copies_every_fitting_weight_and_shared_token_rows_across_schemas():
    from ddrive_ros.training.transfer import transfer_weights

    source = ckpt.build_random("tiny", "trajectory_only", block_size=16, seed=1)
    target = ckpt.build_random("tiny", "fast_ddrive", block_size=32, seed=2)
    before = {k: v.clone() for k, v in target.model.state_dict().items()}
    report = transfer_weights(target, source)
    src, dst = source.model.state_dict(), target.model.state_dict()
    for name in report.copied:
        assert torch.equal(dst[name], src[name]), name
    assert any(n.startswith("backbone.layers.") for n in report.copied)
    assert any(n.startswith("vision.") for n in report.copied)
    emb = "backbone.embed.weight"
    shared = [t for t in target.tokenizer.tokens if source.tokenizer.has(t)]
    assert report.shared_tokens == len(shared) and "<nav:TURN_LEFT>" in shared and "trajectory" in shared
    for tok in ("<nav:TURN_LEFT>", "trajectory"):
        assert torch.equal(dst[emb][target.tokenizer.id(tok)], src[emb][source.tokenizer.id(tok)])
    only_target = next(t for t in target.tokenizer.tokens if not source.tokenizer.has(t))
    i = target.tokenizer.id(only_target)
    assert torch.equal(dst[emb][i], before[emb][i])  # a token the source never had keeps its initialisation
    assert report.copied_weights / report.total_weights > 0.9


def test_transfer_refuses_a_different_backbone():
    from ddrive_ros.training.transfer import transfer_weights

    target = ckpt.build_random("tiny", "fast_ddrive", block_size=32, seed=2)
    other = ckpt.build_random("tiny", "trajectory_only", block_size=16, seed=1)
    other.config = dataclasses.replace(other.config, backbone=dataclasses.replace(other.config.backbone, layers=3))
    with pytest.raises(ValueError, match="same backbone"):
        transfer_weights(target, other)


def test_section_weights_override_the_schemas_and_a_wrong_name_is_an_error():
    from ddrive_ros.training.losses import DualStreamLoss
    from ddrive_ros.training.noise import section_weights

    bundle = ckpt.build_random("tiny", "fast_ddrive")
    layout = Layout(bundle.schema, bundle.tokenizer, 32)
    names = bundle.schema.section_names
    base = section_weights(layout)
    up = section_weights(layout, {"future_meta_behavior": 16.0})
    meta = layout.section == names.index("future_meta_behavior")
    assert np.all(up[meta] == 16.0) and np.array_equal(up[~meta], base[~meta])
    loss = DualStreamLoss(layout, bundle.config.prompt_len, section_weight_overrides={"trajectory": 0.0})
    assert float(loss.weight[torch.as_tensor(layout.section == names.index("trajectory"))].abs().sum()) == 0.0
    with pytest.raises(ValueError, match="meta_behaviour"):
        section_weights(layout, {"meta_behaviour": 4.0})
    with pytest.raises(ValueError, match=">= 0"):
        section_weights(layout, {"trajectory": -1.0})
    assert TrainConfig.from_dict({"section_weights": {"trajectory": 1.0}}).section_weights == {"trajectory": 1.0}


def test_balancing_by_a_label_field_evens_out_its_classes(world_samples):
    from ddrive_ros.training.trainer import balance_key, sampling_weights

    bundle = ckpt.build_random("tiny", "fast_ddrive")
    layout = Layout(bundle.schema, bundle.tokenizer, 32)
    data = tensorize((list(world_samples) * 6)[:6], Codec(layout), bundle.config)
    pos = next(i for i, s in enumerate(layout.slots) if s is not None and s.field == "future_meta_behavior.lateral")
    tok = bundle.tokenizer
    classes = ["STRAIGHT", "STRAIGHT", "STRAIGHT", "STRAIGHT", "LEFT_TURN", "RIGHT_CHANGE"]
    data.ids[:, pos] = torch.tensor([tok.id(c) for c in classes])
    data.labelled[5, pos] = False  # an unlabelled sample is a class of its own
    key = balance_key(data, layout, "future_meta_behavior.lateral")
    assert key.tolist()[:5] == [tok.id(c) for c in classes[:5]] and int(key[5]) == -1
    w = sampling_weights(key, 1.0)
    assert float(w[4]) == pytest.approx(1 / 3) and float(w[:4].sum()) == pytest.approx(1 / 3)
    assert torch.equal(balance_key(data, layout, "nav"), data.nav)
    with pytest.raises(ValueError, match="one-token field"):
        balance_key(data, layout, "trajectory.waypoints")
