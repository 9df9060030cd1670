"""The jerk-penalised speed profile keeps the plan's path, its stops and its start state, and removes the
jerk a 0.1 m waypoint wobble puts into a plan driven through every waypoint exactly."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros.speed_smoothing import (START_ACCEL, START_RELEASE_MPS, START_SHORTFALL, START_STANDING_MPS,
                                       follow_meta_speed, follows_meta, smooth_speed_profile, start_on_meta)
from ddrive_ros.timeline import OUTPUT_TIMES as T


def _on_polyline(points: np.ndarray, path: np.ndarray) -> float:
    """Largest distance from any point to the polyline `path`."""
    worst = 0.0
    for p in points:
        best = np.inf
        for a, b in zip(path[:-1], path[1:]):
            ab = b - a
            u = 0.0 if ab @ ab == 0 else float(np.clip((p - a) @ ab / (ab @ ab), 0.0, 1.0))
            best = min(best, float(np.hypot(*(a + u * ab - p))))
        worst = max(worst, best)
    return worst


def _lon_jerk(xy: np.ndarray) -> np.ndarray:
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(np.vstack([[0.0, 0.0], xy]), axis=0).T))])
    t = np.concatenate([[0.0], T])
    v = np.diff(s) / np.diff(t)
    return np.diff(v, 2) / 0.25 ** 2


def _wobbly_curve(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.round(10.0 * T + rng.normal(0.0, 0.1, len(T)), 1)  # a decoded plan: 0.1 m bins, a wobble in spacing
    return np.stack([x, 0.01 * x ** 2], axis=1)


def test_weight_zero_returns_the_plan_unchanged():
    xy = _wobbly_curve()
    assert np.array_equal(smooth_speed_profile(xy, T, 10.0, 0.0, 0.0), xy)


def test_it_keeps_the_path_and_removes_the_wobble_jerk():
    xy = _wobbly_curve()
    out = smooth_speed_profile(xy, T, 10.0, 0.0, 0.03)
    path = np.vstack([[0.0, 0.0], xy])
    assert _on_polyline(out, path) < 1e-9  # only re-timed along the path, never moved off it
    assert np.abs(out - xy).max() < 0.3
    raw, smooth = np.abs(_lon_jerk(xy)).max(), np.abs(_lon_jerk(out)).max()
    assert raw > 8.0 and smooth < raw / 4, (raw, smooth)


def test_a_hard_stop_stays_a_stop_and_is_never_passed_or_reversed():
    def s_of(t):  # 10 m/s, brake at -5 m/s^2 from 0.5 s, standing at 15 m from 2.5 s
        return np.where(t < 0.5, 10 * t, np.where(t < 2.5, 5 + 10 * (t - 0.5) - 2.5 * (t - 0.5) ** 2, 15.0))

    xy = np.stack([s_of(T), np.zeros_like(T)], axis=1)
    out = smooth_speed_profile(xy, T, 10.0, 0.0, 0.1)
    assert np.all(np.diff(out[:, 0]) >= 0)  # no reversing
    assert out[:, 0].max() <= 15.0 + 1e-12  # never past the plan's own end
    assert out[-1, 0] == pytest.approx(15.0)
    assert np.abs(out - xy).max() < 0.3


def test_it_starts_from_the_egos_speed_and_acceleration():
    # the plan says 12 m/s from the start while the ego drives 10 m/s: the re-timed plan starts near 10
    xy = np.stack([12.0 * T, np.zeros_like(T)], axis=1)
    out = smooth_speed_profile(xy, T, 10.0, 0.0, 0.1)
    assert out[0, 0] / T[0] == pytest.approx(10.0, abs=0.3)
    assert smooth_speed_profile(np.zeros((len(T), 2)), T, 0.0, 0.0, 0.1).tolist() == np.zeros((len(T), 2)).tolist()


def test_it_never_runs_ahead_of_a_plan_that_brakes_now():
    # the ego cruises at 10 m/s with no deceleration yet; the new plan brakes at -6 m/s^2 from t = 0
    s = np.where(T < 10 / 6, 10 * T - 3 * T ** 2, 10 ** 2 / 12)
    xy = np.stack([s, np.zeros_like(T)], axis=1)
    uncapped = smooth_speed_profile(xy, T, 10.0, 0.0, 0.1, lead_m=np.inf)
    capped = smooth_speed_profile(xy, T, 10.0, 0.0, 0.1, lead_m=0.15)
    assert (uncapped[:, 0] - s).max() > 0.3  # a jerk-penalised fit alone spreads the braking and runs ahead
    assert (capped[:, 0] - s).max() <= 0.15 + 1e-12
    assert np.all(np.diff(capped[:, 0]) >= 0)


@pytest.mark.parametrize("xy, times, weight, match", [
    (np.zeros((3, 2)), T, 0.1, "one row per time"),
    (np.zeros((len(T), 2)), T, -1.0, "weight"),
    (np.zeros((len(T), 2)), T[::-1].copy(), 0.1, "increasing"),
])
def test_bad_input_is_refused_with_a_named_error(xy, times, weight, match):
    with pytest.raises(ValueError, match=match):
        smooth_speed_profile(xy, times, 5.0, 0.0, weight)


def test_the_planner_smooths_its_trajectory_and_leaves_its_tokens_alone():
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.observation import Observation
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    bundle = build_random("tiny", "trajectory_only", seed=3)
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=np.stack([-np.arange(4, 0, -1) * 3.0,
                      np.zeros(4)], 1), speed=6.0, accel=0.5, yaw_rate=0.0, nav_command="FOLLOW_LANE", stamp=1.0)
    plain, plain_ids = Planner(bundle, PlannerOptions(draft_previous=False, speed_smoothing=0.0)).plan_and_ids(obs)
    smooth, smooth_ids = Planner(bundle, PlannerOptions(draft_previous=False, speed_smoothing=0.1)).plan_and_ids(obs)
    assert np.array_equal(plain_ids, smooth_ids)
    assert np.array_equal(plain.waypoints, smooth.waypoints)
    expected = smooth_speed_profile(plain.trajectory[:, 1:3], T, 6.0, 0.5, 0.1)
    np.testing.assert_allclose(smooth.trajectory[:, 1:3], expected, atol=1e-9)


def _speeds(xy: np.ndarray) -> np.ndarray:
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(np.vstack([[0.0, 0.0], xy]), axis=0).T))])
    return np.diff(s) / np.diff(np.concatenate([[0.0], T]))


def test_a_plan_that_says_stop_and_keeps_going_is_retimed_to_its_own_meta():
    curve = np.stack([6.0 * T, 0.02 * (6.0 * T) ** 2], axis=1)  # 6 m/s on, along a curve
    out = follow_meta_speed(curve, T, 6.0, "STOP", 0.0)
    assert _on_polyline(out, np.vstack([[0.0, 0.0], curve])) < 1e-9  # the same path
    straight = follow_meta_speed(np.stack([6.0 * T, np.zeros_like(T)], axis=1), T, 6.0, "STOP", 0.0)
    s_cap = 6.0 * T - 0.5 * (6.0 / 5.0) * T ** 2
    np.testing.assert_allclose(straight[:, 0], s_cap, atol=1e-9)  # a constant deceleration to 0 at 5 s
    assert _speeds(out)[-1] < 0.2 and np.all(np.diff(_speeds(out)) <= 1e-9)
    slow = follow_meta_speed(curve, T, 6.0, "DECELERATE", 3.0)
    assert abs(_speeds(slow)[-1] - 3.0) < 0.2  # to the meta's target speed, not to a stop


@pytest.mark.parametrize("lon, target, v0", [("KEEP", 0.0, 6.0), ("ACCELERATE", 0.0, 6.0), ("STOP", 6.5, 6.0)])
def test_it_never_touches_a_plan_whose_meta_does_not_slow_or_that_already_slows(lon, target, v0):
    curve = np.stack([6.0 * T, np.zeros_like(T)], axis=1)
    assert follow_meta_speed(curve, T, v0, lon, target) is curve
    braking = np.stack([6.0 * T - 0.6 * T ** 2 - 0.001, np.zeros_like(T)], axis=1)  # already stops by 5 s
    np.testing.assert_array_equal(follow_meta_speed(braking, T, 6.0, "STOP", 0.0), braking)


def test_it_refuses_a_bad_target_speed_by_name():
    with pytest.raises(ValueError, match="target_speed"):
        follow_meta_speed(np.zeros((len(T), 2)), T, 5.0, "STOP", float("nan"))
    with pytest.raises(ValueError, match="xy must be"):
        follow_meta_speed(np.zeros((3, 2)), T, 5.0, "STOP", 0.0)


def test_the_planner_follows_its_meta_speed_only_when_asked():
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.observation import Observation
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    bundle = build_random("tiny", "fast_ddrive_bins", seed=4)  # its meta: STOP to 7.8 m/s, under the ego's 9 m/s
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=np.stack([-np.arange(4, 0, -1) * 4.5,
                      np.zeros(4)], 1), speed=9.0, accel=0.0, yaw_rate=0.0, nav_command="FOLLOW_LANE", stamp=1.0)
    plain, plain_ids = Planner(bundle, PlannerOptions(draft_previous=False)).plan_and_ids(obs)
    follow, follow_ids = Planner(bundle, PlannerOptions(draft_previous=False, follow_meta_speed="always")).plan_and_ids(obs)
    assert np.array_equal(plain_ids, follow_ids)  # the tokens (and so the published meta) are the same
    m = plain.meta
    assert m.longitudinal in ("DECELERATE", "STOP") and m.target_speed < 9.0
    assert all(plain.validity[f"future_meta_behavior.{k}"] for k in ("longitudinal", "target_speed"))
    expected = follow_meta_speed(plain.trajectory[:, 1:3], T, 9.0, m.longitudinal, m.target_speed)
    assert not np.allclose(expected, plain.trajectory[:, 1:3])
    np.testing.assert_allclose(follow.trajectory[:, 1:3], expected, atol=1e-9)


def test_named_mode_follows_only_a_plan_that_names_a_reason_to_slow_and_unknown_modes_are_refused():
    assert follows_meta("always", {}) and not follows_meta("off", {"lead_vehicle": True})
    assert follows_meta("named", {"lead_vehicle": True, "green_light": False})
    assert follows_meta("named", {"stop_sign": True}) and follows_meta("named", {"pedestrian_crossing": True})
    assert not follows_meta("named", {"lead_vehicle": False, "green_light": True, "intersection_ahead": True})
    with pytest.raises(ValueError, match="follow_meta_speed"):
        follows_meta("sometimes", {})
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    with pytest.raises(ValueError, match="follow_meta_speed"):
        Planner(build_random("tiny", "trajectory_only", seed=3), PlannerOptions(follow_meta_speed="yes"))


def _pull_away(v0: float, target: float) -> np.ndarray:
    t_reach = (target - v0) / START_ACCEL
    ramp = np.minimum(T, t_reach)
    return v0 * ramp + 0.5 * START_ACCEL * ramp ** 2 + target * np.maximum(T - t_reach, 0.0)


def test_a_standing_plan_whose_meta_says_go_pulls_away_straight_on_or_along_its_own_path():
    frozen = np.stack([np.linspace(0.0, 0.1, len(T)), np.zeros_like(T)], axis=1)  # 0.1 m in 5 s
    out = start_on_meta(frozen, T, 0.2, "ACCELERATE", 4.0)
    np.testing.assert_allclose(out[:, 0], _pull_away(0.2, 4.0), atol=1e-9)  # 1 m/s^2 to 4 m/s, then held
    np.testing.assert_allclose(out[:, 1], 0.0, atol=1e-12)  # no direction of its own: straight ahead
    creeping = np.stack([np.linspace(0.05, 2.0, len(T)), np.linspace(0.0, -1.0, len(T))], axis=1)  # 2.2 m, to the right
    bent = start_on_meta(creeping, T, 0.2, "ACCELERATE", 4.0)
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(np.vstack([[0.0, 0.0], bent]), axis=0).T))])[1:]
    np.testing.assert_allclose(s, _pull_away(0.2, 4.0), atol=0.01)  # chords cut the corner after the first waypoint
    heading = np.arctan2(creeping[-1, 1] - creeping[-2, 1], creeping[-1, 0] - creeping[-2, 0])
    tail = bent[-1] - bent[-5]
    assert abs(np.arctan2(tail[1], tail[0]) - heading) < 1e-6  # extended straight on from its last segment


@pytest.mark.parametrize("lon, target, v0", [("KEEP", 4.0, 0.2), ("DECELERATE", 4.0, 0.2), ("ACCELERATE", 0.1, 0.2),
                                             ("ACCELERATE", 4.0, START_STANDING_MPS)])
def test_it_leaves_a_plan_alone_unless_the_ego_stands_and_the_meta_says_accelerate(lon, target, v0):
    frozen = np.zeros((len(T), 2))
    assert start_on_meta(frozen, T, v0, lon, target) is frozen
    moving = np.stack([_pull_away(0.2, 4.0) * (START_SHORTFALL + 0.05), np.zeros_like(T)], axis=1)  # already goes
    assert start_on_meta(moving, T, 0.2, "ACCELERATE", 4.0) is moving
    # a pull-away under way goes on up to START_RELEASE_MPS (the planner passes it while the last plan pulled away)
    assert start_on_meta(frozen, T, 1.5, "ACCELERATE", 4.0, standing=START_RELEASE_MPS) is not frozen
    with pytest.raises(ValueError, match="target_speed"):
        start_on_meta(frozen, T, 0.0, "ACCELERATE", float("inf"))


def test_the_planner_pulls_away_only_when_asked_and_goes_on_while_the_pull_away_is_under_way():
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.observation import Observation
    from ddrive_ros.plan import MetaBehavior, Plan
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions

    bundle = build_random("tiny", "fast_ddrive_bins", seed=3)
    frozen = Plan("fast_ddrive_bins", np.zeros((10, 2)), np.arange(1, 11) * 0.5, explanation="the road ahead is clear .",
                  meta=MetaBehavior("ACCELERATE", "STRAIGHT", 4.0, "OFF"))
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=np.zeros((4, 2)), speed=1.5, accel=0.0,
                      yaw_rate=0.0, nav_command="FOLLOW_LANE", stamp=1.0)
    for asked in (False, True):
        planner = Planner(bundle, PlannerOptions(draft_previous=False, start_on_meta=asked))
        ids = planner.codec.encode(frozen).ids[None]  # the tokens of a standing plan whose meta says ACCELERATE
        first = planner._postprocess(ids, obs)
        assert first.meta.longitudinal == "ACCELERATE" and not first.pulled_away  # 1.5 m/s is not standing
        assert first.trajectory[-1, 1] < 1.0
        first.pulled_away, first.stamp = True, obs.stamp - 0.2  # as if a pull-away had started 0.2 s before
        planner._previous = (first, ids[0])
        going = planner._postprocess(ids, obs)
        assert going.pulled_away == asked and (going.trajectory[-1, 1] > 10.0) == asked
        first.stamp = obs.stamp - 2.0  # too old to go on from
        assert not planner._postprocess(ids, obs).pulled_away


def test_a_pull_away_that_meets_a_road_user_the_decoded_plan_kept_clear_of_is_refused():
    """start_on_meta is written after safety reflection, so the planner checks it against reflection's context: a
    standing car 6 m ahead refuses the pull-away, one in the next lane does not."""
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.observation import Observation
    from ddrive_ros.plan import MetaBehavior, Plan
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.reflection.safety import Obstacle, SafetyContext

    bundle = build_random("tiny", "fast_ddrive_bins", seed=3)
    frozen = Plan("fast_ddrive_bins", np.zeros((10, 2)), np.arange(1, 11) * 0.5, explanation="the road ahead is clear .",
                  meta=MetaBehavior("ACCELERATE", "STRAIGHT", 4.0, "OFF"))
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=np.zeros((4, 2)), speed=0.0, accel=0.0,
                      yaw_rate=0.0, nav_command="FOLLOW_LANE", stamp=1.0)
    planner = Planner(bundle, PlannerOptions(draft_previous=False, start_on_meta=True, reflect="safety"))
    ids = planner.codec.encode(frozen).ids[None]
    ahead = SafetyContext(v0=0.0, obstacles=(Obstacle(8.0, 0.0, 0.0, 4.5, 1.9),))
    beside = SafetyContext(v0=0.0, obstacles=(Obstacle(8.0, 3.5, 0.0, 4.5, 1.9),))
    refused = planner._postprocess(ids, obs, ahead)
    assert refused.pull_away_refused and not refused.pulled_away and refused.trajectory[-1, 1] < 1.0
    assert refused.to_json_dict()["pull_away"] == "refused"  # what the node publishes, and counts
    going = planner._postprocess(ids, obs, beside)
    assert going.pulled_away and not going.pull_away_refused and going.trajectory[-1, 1] > 5.0
    assert going.to_json_dict()["pull_away"] == "pulled"
    assert "pull_away" not in frozen.to_json_dict()
    alone = planner._postprocess(ids, obs)  # no context (reflection off, or no road users given): not checked
    assert alone.pulled_away
