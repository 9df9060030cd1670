"""bench/lane_change_trace.py: the trace of a real closed-loop lane change, and the blanked-motion driver."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.planner import Planner, PlannerOptions
from ddrive_ros.sim.closed_loop_run import LoopOptions
from ddrive_ros.sim.sample import episode_seeds
from ddrive_ros.timeline import PAST_TIMES
from conftest import load_bench_script


@pytest.fixture(scope="module")
def trace():
    return load_bench_script("lane_change_trace")


@pytest.fixture(scope="module")
def planner():
    return Planner(ckpt.load("trajectory_only_tiny"), PlannerOptions(decoder="speculative"))


def test_blanked_driver_hands_the_planner_no_motion_of_its_own(trace, planner):
    seen = []

    class Spy:
        restart_sampling = staticmethod(planner.restart_sampling)

        def plan(self, obs):
            seen.append(obs)
            return planner.plan(obs)

    seed = episode_seeds(31, 60)[58]  # a right lane change under way from the first plan (heading -9 deg)
    r = trace.trace_episode(Spy(), seed, LoopOptions(duration_s=4.0, latency_ms=200.0), "both")
    assert abs(r["model_yaw_deg"][0]) > 5.0  # so there is motion to blank
    assert seen
    for obs in seen:
        assert obs.yaw_rate == 0.0
        assert np.allclose(obs.past_xy[:, 1], 0.0) and np.allclose(obs.past_xy[:, 0], obs.speed * PAST_TIMES)


def test_trace_of_a_lane_change_has_one_row_per_plan_and_the_experts_drive(trace, planner):
    seed = episode_seeds(31, 60)[35]
    r = trace.trace_episode(planner, seed, LoopOptions(duration_s=5.0, latency_ms=200.0), None)
    assert r["maneuver"] == "change_right" and r["target_d"] == pytest.approx(-8.75)
    assert len(r["plans"]) >= 10 and all(len(p["plan_minus_route_m"]) == 4 for p in r["plans"])
    assert [p["t"] for p in r["plans"]] == sorted(p["t"] for p in r["plans"])
    # the expert drives the same episode on its route: its lateral offset starts where the model's does
    assert r["expert_d"][0] == pytest.approx(r["model_d"][0], abs=1e-6)
    assert r["expert_pdms"] > 0.9


def test_trace_with_safety_hands_each_plan_the_worlds_context(trace, planner):
    from ddrive_ros.reflection.safety import SafetyContext

    contexts = []

    class Spy:
        restart_sampling = staticmethod(planner.restart_sampling)

        def plan(self, obs, context=None):
            contexts.append(context)
            return planner.plan(obs, context)

    seed = episode_seeds(31, 60)[35]
    trace.trace_episode(Spy(), seed, LoopOptions(duration_s=3.0, latency_ms=200.0), None, safety=True)
    assert contexts and all(isinstance(c, SafetyContext) and c.corridor is not None for c in contexts)
