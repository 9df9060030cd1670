"""Drafting from the previous plan: speculative decoding verifies a draft from outside the model, so the
plan never changes (greedy = AR, sampling keeps the AR distribution) and a stream costs fewer forwards."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.plan import MetaBehavior, Plan
from ddrive_ros.previous_plan import carried_forward, prior_ids
from ddrive_ros.runtime.backend import PRIOR_RUN_POSITIONS
from ddrive_ros.runtime.torch_backend import TorchBackend
from ddrive_ros.timeline import OUTPUT_TIMES
from test_decoding import inputs, layout_for


def _decode(bundle, decoder, prior=None, options=None, rows=1, run_positions=None):
    layout = layout_for(bundle, decoder)
    backend = TorchBackend(bundle.model, layout.window, max_rows=rows)
    if run_positions is not None:  # a GPU backend's setting, here on the CPU (the tokens do not depend on it)
        backend.prior_run_positions = run_positions
    prompt = backend.prompt(*inputs(bundle))
    return decode(backend, layout, prompt, make_strategy(decoder), options, prior=prior)


@pytest.mark.parametrize("fixture", ["tiny_fast", "tiny_traj"])
def test_a_prior_that_is_the_plan_costs_one_forward_per_block_or_per_kind_of_section(fixture, request):
    bundle = request.getfixturevalue(fixture)
    ar, _ = _decode(bundle, "ar")
    layout = layout_for(bundle, "speculative")
    # block by block (the CPU setting): one verification per block, fully accepted, which is also its commit
    spec, stats = _decode(bundle, "speculative", prior=ar[0])
    assert torch.equal(spec, ar)
    assert stats.prior_blocks == len(layout.blocks)
    assert stats.forwards == 1 + len(layout.blocks), stats.forwards_per_section
    # with prior runs (the GPU setting)
    spec, stats = _decode(bundle, "speculative", prior=ar[0], run_positions=PRIOR_RUN_POSITIONS["cuda"])
    assert torch.equal(spec, ar)
    # the text blocks in one causal forward and the trajectory blocks in another, both accepted whole:
    # that verification is also their commit
    kinds = len({bool(layout.action[b.start]) for b in layout.blocks})
    assert stats.forwards == 1 + kinds, stats.forwards_per_section
    multi = sum(sum(bool(layout.action[b.start]) == k for b in layout.blocks) > 1 for k in (False, True))
    assert stats.forwards_per_section.get("prior run", 0) == multi


def test_a_prior_wrong_from_the_middle_of_a_run_gives_the_ar_plan(tiny_fast):
    """The run's agreeing prefix is final; the block it stops in continues from there (the verifier's
    token at the disagreement, recomputed K/V) and the blocks after it verify the rest of the prior.
    Wrong tokens in a text block, at a block's second position, in the trajectory and at its end."""
    bundle = tiny_fast
    ar, _ = _decode(bundle, "ar")
    layout = layout_for(bundle, "speculative")
    editable = np.flatnonzero(layout.editable)
    for where in (editable[len(editable) // 3], layout.blocks[1].start + 1, editable[-20], editable[-1]):
        prior = ar[0].clone()
        i = int(where) if layout.editable[int(where)] else int(editable[editable > where][0])
        prior[i] = int(next(t for t in np.flatnonzero(layout.allowed[i]) if t != int(ar[0, i])))
        spec, stats = _decode(bundle, "speculative", prior=prior, run_positions=PRIOR_RUN_POSITIONS["cuda"])
        assert torch.equal(spec, ar), where
        kinds = len({bool(layout.action[b.start]) for b in layout.blocks})
        assert stats.forwards <= 1 + kinds + 3, stats.forwards_per_section


@pytest.mark.parametrize("fixture", ["tiny_fast", "tiny_traj"])
def test_a_wrong_prior_still_gives_the_ar_plan(fixture, request):
    bundle = request.getfixturevalue(fixture)
    ar, _ = _decode(bundle, "ar")
    layout = layout_for(bundle, "speculative")
    rng = np.random.default_rng(4)
    wrong = layout.template_ids.copy()
    for i in np.flatnonzero(layout.editable):  # an allowed token, chosen at random: mostly not the model's
        wrong[i] = rng.choice(np.flatnonzero(layout.allowed[i]))
    spec, stats = _decode(bundle, "speculative", prior=torch.from_numpy(wrong))
    assert torch.equal(spec, ar)
    assert stats.prior_blocks == len(layout.blocks)
    # a wrong draft is verified once, then the block drafts itself: at most one extra forward per text block
    # (trajectory blocks redraft from the verifier, so there a wrong first draft costs no extra forward at all)
    _, own = _decode(bundle, "speculative")
    text_blocks = sum(not layout.action[b.start] for b in layout.blocks)
    assert stats.forwards <= own.forwards + text_blocks + 1, (stats.forwards_per_section, own.forwards_per_section)


def test_blocks_whose_prior_is_masked_or_not_allowed_draft_themselves(tiny_fast):
    ar, _ = _decode(tiny_fast, "ar")
    layout = layout_for(tiny_fast, "speculative")
    prior = ar[0].clone()
    first, second = layout.blocks[0], layout.blocks[1]
    prior[first.start + int(np.flatnonzero(layout.editable[first.start:first.end])[-1])] = tiny_fast.tokenizer.mask_id
    prior[second.start + int(np.flatnonzero(layout.editable[second.start:second.end])[-1])] = tiny_fast.tokenizer.bos_id
    spec, stats = _decode(tiny_fast, "speculative", prior=prior)
    assert torch.equal(spec, ar)
    assert stats.prior_blocks == len(layout.blocks) - 2
    with pytest.raises(ValueError, match="prior draft has"):
        _decode(tiny_fast, "speculative", prior=prior[:-1])


def test_a_deterministic_proposal_keeps_the_ar_distribution():
    """A prior is a deterministic proposal (one-hot p): accepted with probability q(d), else resampled
    from q without d. The verifier's samples must follow q, not the prior."""
    from ddrive_ros.decoding.sampling import verify

    n, v, d = 20_000, 6, 1
    g = torch.Generator().manual_seed(2)
    q = torch.softmax(2.0 * torch.randn(v, generator=g), -1)
    q = torch.where(torch.arange(v) == d, torch.tensor(0.3), q * 0.7 / (q.sum() - q[d]))  # q(d) = 0.3
    draft = torch.full((n, 1), d)
    p = torch.nn.functional.one_hot(draft, v).float()
    tokens, decided, _ = verify(draft, p, q.expand(n, 1, v), torch.ones(n, 1, dtype=torch.bool), False, g)
    assert bool(decided.all())
    emp = torch.bincount(tokens[:, 0], minlength=v).float() / n
    assert 0.5 * (emp - q).abs().sum().item() < 0.02
    assert abs(float(emp[d]) - 0.3) < 0.02  # not always accepted (1.0), not never (0.0)


def test_sampled_decoding_takes_the_prior_as_a_one_hot_proposal(tiny_fast):
    greedy, _ = _decode(tiny_fast, "ar")
    opt = DecodeOptions(temperature=1.0, rollouts=2, rollout_temperature=1.0, seed=3)
    layout = layout_for(tiny_fast, "speculative")
    for run_positions in (0, PRIOR_RUN_POSITIONS["cuda"]):
        ids, stats = _decode(tiny_fast, "speculative", prior=greedy[0], options=opt, rows=2, run_positions=run_positions)
        assert stats.prior_blocks == len(layout.blocks)
        allowed = layout.allowed[np.arange(layout.length)[None], ids.numpy()]
        assert allowed.all()  # every sampled token is one its position may take
        assert ("prior run" in stats.forwards_per_section) == (run_positions > 0)


def _arc_plan(radius: float, speed: float, stamp: float, times: np.ndarray) -> Plan:
    def pose(t):
        a = speed * t / radius
        return radius * np.sin(a), radius * (1 - np.cos(a)), a

    traj = np.array([[t, *pose(t)[:2], pose(t)[2], speed] for t in OUTPUT_TIMES])
    wps = np.array([pose(t)[:2] for t in times])
    return Plan("fast_ddrive", wps, times, critical_objects={"lead_vehicle": True}, explanation="keep lane",
                meta=MetaBehavior("KEEP", "STRAIGHT", speed, "OFF"), trajectory=traj, stamp=stamp)


def test_a_plan_carried_forward_along_its_own_arc_is_the_same_arc():
    times = np.arange(1, 11) * 0.5
    plan = _arc_plan(radius=40.0, speed=8.0, stamp=10.0, times=times)
    moved = carried_forward(plan, 10.5)  # on the waypoints' 0.5 s grid: the interpolation is exact
    np.testing.assert_allclose(moved.waypoints[:-1], plan.waypoints[:-1], atol=1e-9)
    assert moved.stamp == 10.5 and moved.explanation == "keep lane" and moved.critical_objects == plan.critical_objects
    # past the horizon (5.5 s) it goes on at the last velocity, not back to the origin
    assert np.linalg.norm(moved.waypoints[-1] - moved.waypoints[-2]) > 0.9 * 8.0 * 0.5
    straight = Plan("fast_ddrive", np.stack([10 * times, 0 * times], 1), times,
                    trajectory=np.array([[t, 10 * t, 0.0, 0.0, 10.0] for t in OUTPUT_TIMES]), stamp=3.0)
    np.testing.assert_allclose(carried_forward(straight, 3.2).waypoints[:, 0], 10 * times, atol=1e-9)


def test_nothing_is_carried_backwards_or_over_a_long_gap(tiny_fast):
    plan = _arc_plan(radius=40.0, speed=8.0, stamp=10.0, times=np.arange(1, 11) * 0.5)
    assert carried_forward(plan, 10.0) is None
    assert carried_forward(plan, 9.0) is None
    assert carried_forward(plan, 11.5) is None
    from ddrive_ros.scaffold.codec import Codec

    layout = layout_for(tiny_fast, "speculative")
    codec = Codec(layout)
    previous = codec.encode(plan).ids
    ids = prior_ids(codec, plan, previous, 10.2)
    # the text sections are the previous ids; the trajectory is the carried-forward plan, spelled anew
    assert np.array_equal(ids[~layout.action], previous[~layout.action])
    assert np.array_equal(ids[layout.action], codec.encode(carried_forward(plan, 10.2)).ids[layout.action])
    assert prior_ids(codec, plan, previous, 9.0) is None
    with pytest.raises(ValueError, match="previous plan has"):
        prior_ids(codec, plan, previous[:-1], 10.2)


def test_a_planner_on_a_stream_plans_the_same_with_fewer_forwards():
    """The shipped model on consecutive frames at 5 Hz: the same ids with and without the previous-plan
    draft, fewer forwards with it; restarting (a new episode) forgets the previous plan."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.sample import samples_from_world

    stream = [s.observation for s, _ in zip(samples_from_world(seed=10_003, n_episodes=1, stride_s=0.2, progress=False), range(6))]
    runs = {}
    for draft in (False, True):
        planner = Planner.from_checkpoint("fast_ddrive_tiny", draft_previous=draft)
        runs[draft] = [planner.plan_and_ids(obs) for obs in stream]
    for (p0, ids0), (p1, ids1) in zip(runs[False], runs[True]):
        assert np.array_equal(ids0, ids1)
    # the first plan has no previous one: its trajectory blocks draft from the ego state (kinematic_draft.py)
    first = runs[True][0][0].stats
    n_traj = len(planner.layout.section_blocks(planner.schema.section_names.index("trajectory")))
    assert first.prior == "kinematic" and first.prior_blocks == n_traj
    assert all(p.stats.prior == "previous" and p.stats.prior_blocks > n_traj for p, _ in runs[True][1:])
    without = sum(p.stats.forwards for p, _ in runs[False][1:])
    with_prior = sum(p.stats.forwards for p, _ in runs[True][1:])
    assert with_prior < 0.85 * without, (with_prior, without)
    planner.restart_sampling()
    assert planner.plan(stream[-1]).stats.prior == "kinematic"


def test_a_draft_from_another_scene_costs_at_most_one_forward_per_text_block():
    """The shipped model's own drafts are good; a previous plan from another scene is wrong almost everywhere
    in its text. Verified once, then the block drafts itself: at most one wasted forward per text block."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.sample import samples_from_world

    samples = list(zip(samples_from_world(seed=10_005, n_episodes=4, progress=False), range(80)))
    planner = Planner.from_checkpoint("fast_ddrive_tiny", draft_previous=False)
    first, other = samples[0][0].observation, None
    plan_first, ids_first = planner.plan_and_ids(first)
    for sample, _ in samples[1:]:
        if planner.plan(sample.observation).explanation != plan_first.explanation:
            other = sample.observation
            break
    assert other is not None, "no scene with another explanation in these episodes"
    layout, backend = planner.layout, planner.backend
    _, own = decode(backend, layout, planner.prompt_for(other), planner.strategy)
    ids, stale = decode(backend, layout, planner.prompt_for(other), planner.strategy, prior=torch.from_numpy(ids_first[0]))
    assert np.array_equal(ids.numpy(), planner.plan_and_ids(other)[1])
    text_blocks = sum(not layout.action[b.start] for b in layout.blocks)
    assert stale.forwards <= own.forwards + text_blocks, (stale.forwards_per_section, own.forwards_per_section)
