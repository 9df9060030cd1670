"""PDM-style sub-scores on hand-made situations: each one can fail, and fails for the right reason."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros.sim.road import Road, RoadMap, main_reference, make_intersection
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_FRONT
from ddrive_ros.sim.scorer import (
    MAX_ABS_LON_JERK,
    MIN_LON_ACCEL,
    EgoTrace,
    boxes_overlap,
    comfort,
    ego_progress,
    light_violations,
    on_drivable,
    pdms,
    route_compliance,
    savgol_derivative,
    score_episode,
    time_to_collision,
)

DT = 0.05
ROAD = RoadMap([Road(main_reference(-50.0, 300.0, None), n_forward=2, n_backward=1, speed_limit=12.0)])
LANE0_D = -1.75  # centre of forward lane 0


def straight_drive(v: np.ndarray, d: float = LANE0_D, agents: list[tuple[np.ndarray, float, float]] = (),
                   y_drift: np.ndarray | None = None) -> EgoTrace:
    """The ego driving along +x at speeds v (per step); agents = (x positions per step, y, speed)."""
    n = len(v)
    x = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * DT)])
    y = np.full(n, d) if y_drift is None else d + y_drift
    yaw = np.zeros(n) if y_drift is None else np.concatenate([[0.0], np.arctan2(np.diff(y), np.maximum(np.diff(x), 1e-6))])
    a_xy = np.array([np.stack([ax, np.full(n, ay)], axis=1) for ax, ay, _ in agents]).reshape(len(agents), n, 2)
    return EgoTrace(dt=DT, ego_xy=np.stack([x, y], 1), ego_yaw=yaw, ego_v=v.astype(float), route_s=x.copy(),
                    route_d=y - d, agent_xy=a_xy, agent_yaw=np.zeros((len(agents), n)),
                    agent_v=np.array([np.full(n, av) for _, _, av in agents]).reshape(len(agents), n),
                    agent_half=np.tile([[2.25, 0.95]], (len(agents), 1)), agent_kind=("vehicle",) * len(agents),
                    road_map=ROAD)


def test_boxes_overlap_is_a_separating_axis_test():
    h = np.array([2.0, 1.0])
    c = np.zeros(2)
    assert boxes_overlap(c, np.array(0.0), h, np.array([3.9, 0.0]), np.array(0.0), h)
    assert not boxes_overlap(c, np.array(0.0), h, np.array([4.1, 0.0]), np.array(0.0), h)
    # rotated 45 degrees: the corner reaches 2.12 m along x, so at 4.0 they touch, at 4.3 they do not
    assert boxes_overlap(c, np.array(0.0), h, np.array([4.0, 0.0]), np.array(np.pi / 4), h)
    assert not boxes_overlap(c, np.array(0.0), h, np.array([4.3, 0.0]), np.array(np.pi / 4), h)


def test_rear_ending_a_stopped_car_is_an_at_fault_collision():
    n = 60
    v = np.full(n, 10.0)
    stopped_car_x = 25.0  # the ego front reaches it within 3 s at 10 m/s
    trace = straight_drive(v, agents=[(np.full(n, stopped_car_x), LANE0_D, 0.0)])
    s = score_episode(trace, expert_progress_m=30.0)
    assert s.collisions == 1 and s.at_fault_collisions == 1
    assert s.nc == 0.0 and s.pdms == 0.0
    # the same car one lane over is no collision at all
    clear = score_episode(straight_drive(v, agents=[(np.full(n, stopped_car_x), LANE0_D - 3.5, 0.0)]), 30.0)
    assert clear.nc == 1.0 and clear.collisions == 0


def test_being_rear_ended_while_standing_is_not_the_egos_fault():
    n = 40
    v = np.zeros(n)
    follower_x = -EGO_CENTER_OFFSET - 2.0 * 2.3 - 3.0 + np.arange(n) * 0.2  # closes in from behind at 4 m/s
    s = score_episode(straight_drive(v, agents=[(follower_x, LANE0_D, 4.0)]), expert_progress_m=0.0)
    assert s.collisions == 1 and s.at_fault_collisions == 0 and s.nc == 1.0


def test_leaving_the_road_fails_drivable_area():
    n = 80
    v = np.full(n, 8.0)
    drift = np.linspace(0.0, 6.0, n)  # lane 0 centre (-1.75) + 6 m left: past the 3.5 m left edge
    s = score_episode(straight_drive(v, y_drift=drift), expert_progress_m=30.0)
    assert s.dac == 0.0 and s.pdms == 0.0
    assert score_episode(straight_drive(v), expert_progress_m=30.0).dac == 1.0


def test_intersection_corners_are_drivable_but_the_kerb_outside_them_is_not():
    main = Road(main_reference(-100.0, 300.0, None), 2, 1, 12.0)
    inter, cross, _ = make_intersection(main, 60.0, "stop_sign", None, 3.5, False)
    rm = RoadMap([main, cross], inter)
    near_corner = np.array([[60.0 - 3.5 - 0.5, main.edge_right - 0.5]])  # just inside the rounded corner
    far_off = np.array([[60.0 - 3.5 - 9.0, main.edge_right - 9.0]])  # outside the kerb circle
    assert on_drivable(rm, near_corner)[0]
    assert not on_drivable(rm, far_off)[0]


def test_harsh_brake_fails_comfort_and_a_gentle_one_passes():
    n = 100
    harsh = np.maximum(12.0 - np.maximum(np.arange(n) - 20, 0) * DT * 6.0, 0.0)  # -6 m/s^2
    gentle = np.maximum(12.0 - np.maximum(np.arange(n) - 20, 0) * DT * 1.5, 0.0)
    c_harsh, fails = comfort(straight_drive(harsh))
    assert c_harsh == 0.0 and "lon_accel" in fails and -6.0 < MIN_LON_ACCEL
    c_gentle, fails_gentle = comfort(straight_drive(gentle))
    assert c_gentle == 1.0, fails_gentle


def test_savgol_derivative_is_exact_on_a_quadratic_and_smooths_a_step():
    t = np.arange(50) * DT
    y = 3.0 * t ** 2 - t
    np.testing.assert_allclose(savgol_derivative(y, DT, 1), 6.0 * t - 1.0, atol=1e-6)
    np.testing.assert_allclose(savgol_derivative(y, DT, 2), 6.0, atol=1e-6)
    step = np.where(t < 1.2, 0.0, 1.0)  # an acceleration step of 1 m/s^2
    assert np.abs(savgol_derivative(step, DT, 1)).max() < MAX_ABS_LON_JERK


def test_ttc_sees_a_closing_lead_within_a_second_but_not_a_far_one():
    n = 40
    v = np.full(n, 10.0)
    ego_front = EGO_FRONT
    near = straight_drive(v, agents=[(ego_front + 2.25 + 8.0 + np.arange(n) * DT * 3.0, LANE0_D, 3.0)])
    far = straight_drive(v, agents=[(ego_front + 2.25 + 60.0 + np.arange(n) * DT * 10.0, LANE0_D, 10.0)])
    assert time_to_collision(near) == 0.0
    assert time_to_collision(far) == 1.0


def test_ego_progress_is_relative_to_the_expert_and_one_when_the_expert_stands():
    assert ego_progress(15.0, 30.0) == pytest.approx(0.5)
    assert ego_progress(40.0, 30.0) == 1.0
    assert ego_progress(0.0, 2.0) == 1.0  # the expert waited at a red light: nothing to compare with


def test_pdms_weights_are_navsims():
    assert pdms(1, 1, 1, 1, 1) == pytest.approx(1.0)
    assert pdms(1, 1, 1, 1, 0) == pytest.approx(10 / 12)
    assert pdms(1, 1, 0.5, 0, 1) == pytest.approx((2.5 + 2) / 12)
    assert pdms(0, 1, 1, 1, 1) == 0.0


def test_red_light_and_stop_sign_violations():
    n = 60
    v = np.full(n, 8.0)
    trace = straight_drive(v)
    trace.stop_line_s = 10.0 + EGO_FRONT
    trace.light_main = np.array(["R"] * n, dtype=object)
    assert light_violations(trace) == (1, 0)
    trace.light_main = np.array(["G"] * n, dtype=object)
    assert light_violations(trace) == (0, 0)
    trace.light_main, trace.stop_sign = None, True
    assert light_violations(trace) == (0, 1)  # rolled through the stop sign
    stop_then_go = np.concatenate([np.linspace(6.0, 0.0, 20), np.zeros(10), np.linspace(0.0, 5.0, 30)])
    trace = straight_drive(stop_then_go)
    trace.stop_line_s, trace.stop_sign = float(trace.route_s[25] + EGO_FRONT + 1.0), True
    assert light_violations(trace) == (0, 0)


def test_route_compliance_fails_when_the_ego_ends_a_lane_away():
    n = 60
    assert route_compliance(straight_drive(np.full(n, 8.0))) == 1.0
    trace = straight_drive(np.full(n, 8.0), y_drift=np.linspace(0.0, -3.5, n))
    assert route_compliance(trace) == 0.0


def test_accel_swings_count_a_go_stop_oscillation_that_comfort_smooths_away():
    from ddrive_ros.sim.scorer import accel_swings

    dt = 0.05
    t = np.arange(0, 6, dt)
    steady = 5.0 + 0.5 * t  # accelerating gently: no swing
    assert accel_swings(steady, dt) == 0
    # alternating +3 / -4 m/s^2 every 0.2 s (a plan that says go, then stop, at 5 Hz): 2 swings per 0.4 s cycle
    a = np.where((t // 0.2) % 2 == 0, 3.0, -4.0)
    v = 5.0 + np.concatenate([[0.0], np.cumsum(a[:-1] * dt)])
    swings = accel_swings(v, dt)
    assert 25 <= swings <= 30
    # a single brake-then-go is one swing each way, and small wobbles inside +-1.5 m/s^2 are none
    once = np.concatenate([np.full(40, -3.0), np.full(40, 2.0), 0.5 * np.sin(np.arange(40))])
    assert accel_swings(5.0 + np.concatenate([[0.0], np.cumsum(once * dt)]), dt) == 1
