"""Degenerate scenes work everywhere: a scene with no other road users, a lane change that never
finds a gap, a stop right at t0, an episode shorter than the horizon, and a few hundred sampled
world seeds: building samples, scoring them and planning on them raise nothing."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ddrive_ros.evaluation.evaluate import held_out_samples, score
from ddrive_ros.evaluation.metrics import constant_velocity_prediction
from ddrive_ros.planner import Planner
from ddrive_ros.sample import Sample
from ddrive_ros.sim.sample import episode_seeds, make_sample, valid_anchor_frames
from ddrive_ros.sim.scenario import VEHICLE, LaneAgentSpec, sample_scenario
from ddrive_ros.sim.world import Episode

PROPERTY_SEED = 4242  # a seed neither training (1) nor evaluation (777) uses


@pytest.fixture(scope="module")
def planner():
    return Planner.from_checkpoint("trajectory_only_tiny")


def _samples(episode: Episode) -> list[Sample]:
    return [make_sample(episode, i) for i in valid_anchor_frames(episode, stride_s=2.0)]


def _exercise(samples: list[Sample], planner: Planner) -> None:
    """What eval and the planner do with samples: score the trivial baselines, plan, score the plans."""
    if not samples:
        return
    times = samples[0].future_times
    cv = [constant_velocity_prediction(s.observation.speed, s.observation.yaw_rate, times) for s in samples]
    for row in (score("constant velocity", cv, samples), score("expert", [s.future_xy for s in samples], samples)):
        assert np.isfinite(row["ade"]) and 0.0 <= row["collision_rate"] <= 1.0
    plans = [planner.plan(s.observation) for s in samples]
    row = score("planner", [p.trajectory[:, 1:3] for p in plans], samples, plans, horizon=4.0)
    assert np.isfinite(row["ade"]) and all(np.all(np.isfinite(p.trajectory)) for p in plans)


def _scenario_kind(kind: str, command: str | None = None):
    """The first sampled scenario of a kind (and command) from the property seed."""
    for seed in episode_seeds(PROPERTY_SEED, 400):
        sc = sample_scenario(seed, 9.0)
        if sc.kind == kind and (command is None or sc.nav_command == command):
            return seed, sc
    raise AssertionError(f"no {kind}/{command} scenario in 400 seeds")


def test_a_scene_with_no_other_road_users(planner):
    seed, sc = _scenario_kind("intersection")
    sc.lane_agents.clear()
    sc.walkers.clear()
    episode = Episode(seed, 9.0, scenario=sc)
    assert episode.n_agents == 0
    samples = _samples(episode)
    assert samples and all(s.objects_future.shape == (0, 20, 2) and s.objects_yaw.shape == (0, 20) for s in samples)
    assert not any(s.labels.critical_objects["lead_vehicle"] for s in samples)
    _exercise(samples, planner)


def test_a_lane_change_that_never_finds_a_gap(planner):
    seed, sc = _scenario_kind("straight", "CHANGE_LANE_LEFT")
    target = sc.ego.lane - 1
    sc.lane_agents = [a for a in sc.lane_agents if not (a.road == 0 and a.lane == target)]
    sc.lane_agents += [LaneAgentSpec(VEHICLE, 0, target, s, sc.ego.v0, sc.ego.v0) for s in np.arange(-30.0, 150.0, 7.0)]
    episode = Episode(seed, 9.0, scenario=sc)
    _exercise(_samples(episode), planner)


def test_a_stop_right_at_t0(planner):
    seed, sc = _scenario_kind("straight", "STOP")
    sc.ego = dataclasses.replace(sc.ego, v0=0.0, stop_target=sc.ego.s0 + 4.6)
    episode = Episode(seed, 9.0, scenario=sc)
    samples = _samples(episode)
    assert samples and all(abs(s.observation.speed) < 0.5 for s in samples)
    _exercise(samples, planner)


def test_an_episode_shorter_than_the_horizon_gives_no_samples_and_eval_says_why():
    episode = Episode(episode_seeds(PROPERTY_SEED, 1)[0], 5.0)
    assert valid_anchor_frames(episode) == []
    with pytest.raises(ValueError, match="at least 7 s"):
        held_out_samples(PROPERTY_SEED, 2, duration_s=5.0)


def test_a_few_hundred_world_seeds_build_score_and_plan(planner):
    seeds = episode_seeds(PROPERTY_SEED + 1, 200)
    kinds, built = set(), 0
    for i, seed in enumerate(seeds):
        episode = Episode(seed, (7.0, 7.5, 8.0)[i % 3])
        kinds.add((episode.scenario.kind, episode.scenario.nav_command, episode.n_agents == 0))
        frames = valid_anchor_frames(episode, stride_s=2.0)
        samples = [make_sample(episode, frames[-1])] if frames else []
        built += len(samples)
        _exercise(samples, planner)
        episode.clear_cache()
    assert built >= 190 and len(kinds) >= 8


def test_eval_refuses_a_method_it_does_not_have_instead_of_skipping_it():
    from ddrive_ros.evaluation.evaluate import METHODS, chosen_methods, evaluate

    assert [m[0] for m in chosen_methods("speculative tree=64x2, ar")] == ["ar", "speculative tree=64x2"]
    assert len(chosen_methods("all")) == len(METHODS)
    for bad in ("ar,speculative tree=8", "", " , "):
        with pytest.raises(ValueError, match="unknown eval methods"):
            chosen_methods(bad)
    with pytest.raises(ValueError, match="speculative tree=8"):  # before any checkpoint or world is loaded
        evaluate("no/such/checkpoint", episodes=1, seed=31, methods="speculative tree=8")
