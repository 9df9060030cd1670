"""Codec: valid plans round-trip exactly (trajectory within quantisation); any ids decode without raising."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddrive_ros.plan import MetaBehavior, Plan
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import Schema
from ddrive_ros.scaffold.tokenizer import Tokenizer

FAST = Schema.load("fast_ddrive")
TRAJ = Schema.load("trajectory_only")
CODECS = {s.name: Codec(Layout(s, Tokenizer.build(s), s.default_block_size)) for s in (FAST, TRAJ)}
CO_NAMES = [f.name for f in FAST.section("critical_objects").fields]
META = {f.name: f for f in FAST.section("future_meta_behavior").fields}


@st.composite
def fast_plans(draw):
    n_words = draw(st.integers(0, 192))
    words = draw(st.lists(st.sampled_from(FAST.words), min_size=n_words, max_size=n_words))
    xs = draw(st.lists(st.floats(0, 99.9), min_size=10, max_size=10))
    ys = draw(st.lists(st.floats(-99.9, 99.9), min_size=10, max_size=10))
    return Plan(
        schema="fast_ddrive",
        waypoints=np.stack([xs, ys], 1),
        waypoint_times=np.arange(1, 11) * 0.5,
        critical_objects={n: draw(st.booleans()) for n in CO_NAMES},
        explanation=" ".join(words),
        meta=MetaBehavior(
            longitudinal=draw(st.sampled_from(META["longitudinal"].values)),
            lateral=draw(st.sampled_from(META["lateral"].values)),
            target_speed=round(draw(st.floats(0, 99.9)), 1),
            turn_signal=draw(st.sampled_from(META["turn_signal"].values)),
        ),
    )


@settings(max_examples=40, deadline=None)
@given(fast_plans())
def test_valid_fast_plans_round_trip(plan):
    codec = CODECS["fast_ddrive"]
    enc = codec.encode(plan)
    assert enc.labelled[codec.layout.editable].all()
    back = codec.decode(enc.ids)
    assert back.valid, back.validity
    assert back.critical_objects == plan.critical_objects
    assert back.explanation == plan.explanation
    assert back.meta.longitudinal == plan.meta.longitudinal and back.meta.lateral == plan.meta.lateral
    assert back.meta.turn_signal == plan.meta.turn_signal
    assert abs(back.meta.target_speed - plan.meta.target_speed) <= 0.05 + 1e-9
    assert np.abs(back.waypoints - plan.waypoints).max() <= 0.05 + 1e-9
    assert not enc.clipped


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1.9, 77.9), min_size=8, max_size=8), st.lists(st.floats(-19.9, 19.9), min_size=8, max_size=8))
def test_trajectory_only_plans_round_trip_within_quantisation(xs, ys):
    codec = CODECS["trajectory_only"]
    plan = Plan("trajectory_only", np.stack([xs, ys], 1), np.arange(1, 9) * 0.5)
    back = codec.decode(codec.encode(plan).ids)
    assert back.valid
    assert np.abs(back.waypoints - plan.waypoints).max() <= 0.05 + 1e-9


def test_out_of_range_waypoints_are_clipped_and_flagged():
    codec = CODECS["fast_ddrive"]
    plan = Plan("fast_ddrive", np.array([[150.0, -120.0]] * 10), np.arange(1, 11) * 0.5)
    enc = codec.encode(plan)
    assert enc.clipped
    back = codec.decode(enc.ids)
    assert back.waypoints[0, 0] == 99.9 and back.waypoints[0, 1] == -99.9


def test_sections_without_labels_stay_masked_and_unlabelled():
    codec = CODECS["fast_ddrive"]
    plan = Plan("fast_ddrive", np.zeros((10, 2)), np.arange(1, 11) * 0.5)  # trajectory only
    enc = codec.encode(plan)
    traj = codec.layout.section == 3
    assert enc.labelled[traj & codec.layout.editable].all()
    assert not enc.labelled[~traj].any()
    assert (enc.ids[~traj & codec.layout.editable] == codec.tok.mask_id).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0, 1))
def test_any_id_sequence_decodes_without_raising(seed, keep_template):
    rng = np.random.default_rng(seed)
    for codec in CODECS.values():
        ids = rng.integers(-5, len(codec.tok) + 5, codec.layout.length)
        keep = rng.random(codec.layout.length) < keep_template  # mix nonsense with real scaffold
        ids = np.where(keep, codec.layout.template_ids, ids)
        plan = codec.decode(ids)
        assert plan.waypoints.shape == (codec.schema.waypoint_field().count, 2)
        assert set(plan.validity) and all(isinstance(v, bool) for v in plan.validity.values())


def test_nonsense_in_editable_positions_is_flagged_not_raised():
    codec = CODECS["fast_ddrive"]
    ids = codec.layout.template_ids.copy()  # every editable position still <mask>
    plan = codec.decode(ids)
    assert not plan.valid
    assert plan.meta.longitudinal == "KEEP"  # defaults stand in for invalid values
    assert plan.validity["trajectory"] is False


@pytest.mark.parametrize("schema_name", ["fast_ddrive", "trajectory_only"])
def test_spelling_all_waypoints_at_once_gives_the_per_waypoint_tokens(schema_name):
    from ddrive_ros.checkpoint import build_random

    bundle = build_random("tiny", schema_name, seed=0)
    codec = Codec(Layout(bundle.schema, bundle.tokenizer))
    k = bundle.schema.waypoint_field().count
    rng = np.random.default_rng(0)
    xy = np.stack([rng.uniform(-5, 120, k), rng.uniform(-30, 30, k)], 1)  # some outside the range: clipped
    xy[0] = (0.04, -0.04)  # rounds to zero: never negative
    ids = codec.layout.template_ids.copy()
    codec.spell_waypoints(xy, ids)
    expected = codec.layout.template_ids.copy()
    for i in range(k):
        for position, token in codec.waypoint_tokens(i, xy[i]).items():
            expected[position] = token
    assert np.array_equal(ids, expected)
    with pytest.raises(ValueError, match="waypoints"):
        codec.spell_waypoints(xy[:-1], ids)
