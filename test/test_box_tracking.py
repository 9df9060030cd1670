"""Velocities for boxes that come without them (ddrive_ros/reflection/tracking.py): the node's
~/input/obstacles boxes followed from set to set, with the ego moving and turning between sets."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros.reflection.tracking import BoxTracker
from ddrive_ros.trajectory import world_to_ego, wrap_angle


def _ego_pose(t: float) -> tuple[float, float, float]:
    """An ego driving a left curve at 8 m/s: the boxes' ego-frame motion is mostly its own."""
    yaw = 0.1 * t
    return 80.0 * np.sin(yaw), 80.0 * (1 - np.cos(yaw)), yaw


def _agents(t: float) -> list[tuple[float, float, float, float, float]]:
    """World boxes at t: a lead driving away at 6 m/s, an oncoming car at 10 m/s, a parked car."""
    return [(20.0 + 6.0 * t, 3.0, 0.0, 4.5, 1.9), (60.0 - 10.0 * t, 9.0, np.pi, 4.6, 2.0), (30.0, -4.0, 0.3, 4.0, 1.8)]


def _seen(t: float, order: list[int] | None = None) -> list[tuple]:
    """The agents as boxes in the ego frame at t, in `order` (perception need not keep one)."""
    x, y, yaw = _ego_pose(t)
    out = []
    for i in order if order is not None else range(3):
        ax, ay, ah, length, width = _agents(t)[i]
        p = world_to_ego(np.array([[ax, ay]]), np.array([x, y]), yaw)[0]
        out.append((float(p[0]), float(p[1]), float(wrap_angle(ah - yaw)), length, width))
    return out


def test_velocities_come_from_consecutive_sets_and_the_egos_own_motion_is_taken_out():
    tracker = BoxTracker()
    tracker.update(0.0, _ego_pose(0.0), _seen(0.0))
    first = tracker.obstacles_at(0.0, _ego_pose(0.0))
    assert [(o.vx, o.vy) for o in first] == [(0.0, 0.0)] * 3  # one sighting: unknown, checked as standing
    for k in range(1, 6):
        tracker.update(0.1 * k, _ego_pose(0.1 * k), _seen(0.1 * k, [2, 0, 1] if k % 2 else None))
    t = 0.5
    x, y, yaw = _ego_pose(t)
    got = sorted(tracker.obstacles_at(t, (x, y, yaw)), key=lambda o: o.length)
    parked, lead, oncoming = got[0], got[1], got[2]
    c, s = np.cos(yaw), np.sin(yaw)
    def ego_v(vx, vy):  # a ground velocity in the ego frame at t
        return c * vx + s * vy, -s * vx + c * vy
    assert (lead.vx, lead.vy) == pytest.approx(ego_v(6.0, 0.0), abs=1e-6)
    assert (oncoming.vx, oncoming.vy) == pytest.approx(ego_v(-10.0, 0.0), abs=1e-6)
    assert (parked.vx, parked.vy) == pytest.approx((0.0, 0.0), abs=1e-6)
    # moved on to a later time and pose: where the lead is then, in that ego frame
    later = 0.6
    lx, ly, lyaw = _ego_pose(later)
    lead_later = max(tracker.obstacles_at(later, (lx, ly, lyaw)), key=lambda o: o.vx)
    want = world_to_ego(np.array([[20.0 + 6.0 * later, 3.0]]), np.array([lx, ly]), lyaw)[0]
    assert (lead_later.x, lead_later.y) == pytest.approx(tuple(want), abs=1e-6)


def test_only_the_newest_set_is_given_and_old_tracks_and_backward_time_are_forgotten():
    tracker = BoxTracker(max_gap_s=0.5)
    tracker.update(1.0, (0.0, 0.0, 0.0), [(10.0, 0.0, 0.0, 4.5, 1.9), (20.0, 3.0, 0.0, 4.5, 1.9)])
    tracker.update(1.1, (0.0, 0.0, 0.0), [(10.5, 0.0, 0.0, 4.5, 1.9)])  # the second car is not reported
    got = tracker.obstacles_at(1.1, (0.0, 0.0, 0.0))
    assert len(got) == 1 and got[0].vx == pytest.approx(5.0)
    tracker.update(1.2, (0.0, 0.0, 0.0), [(11.0, 0.0, 0.0, 4.5, 1.9), (20.0, 3.0, 0.0, 4.5, 1.9)])
    back = {round(o.y): o.vx for o in tracker.obstacles_at(1.2, (0.0, 0.0, 0.0))}
    assert back[0] == pytest.approx(5.0) and back[3] == pytest.approx(0.0)  # the missed car came back, standing
    tracker.update(2.0, (0.0, 0.0, 0.0), [(14.0, 0.0, 0.0, 4.5, 1.9)])  # 0.8 s later: past max_gap_s, a new track
    assert tracker.obstacles_at(2.0, (0.0, 0.0, 0.0))[0].vx == 0.0
    tracker.update(0.5, (0.0, 0.0, 0.0), [(14.0, 0.0, 0.0, 4.5, 1.9)])  # time ran backwards: start again
    assert tracker.resets == 1 and tracker.obstacles_at(0.5, (0.0, 0.0, 0.0))[0].vx == 0.0
    tracker.update(0.6, (0.0, 0.0, 0.0), [])
    assert tracker.obstacles_at(0.6, (0.0, 0.0, 0.0)) == ()
    with pytest.raises(ValueError, match="gate_m > 0"):
        BoxTracker(gate_m=0.0)


def test_yaw_rates_follow_a_bending_car_and_stay_zero_for_standing_or_flipped_boxes():
    """A car on a right bend (radius 40 m at 8 m/s: -0.2 rad/s) reads that yaw rate, with the ego's own turning
    taken out; a standing box and a box whose heading flips end for end every set read 0."""
    def world(t: float) -> list[tuple[float, float, float, float, float]]:
        u = -0.2 * t
        bend = (40.0 * np.sin(-u) + 30.0, -40.0 * (1 - np.cos(u)) + 6.0, u, 4.5, 1.9)
        standing = (25.0, -5.0, 0.4, 4.0, 1.8)
        flipping = (10.0 + 5.0 * t, 3.0, np.pi * (round(10 * t) % 2), 4.2, 1.8)
        return [bend, standing, flipping]

    tracker = BoxTracker()
    for k in range(12):
        t = 0.1 * k
        x, y, yaw = _ego_pose(t)
        boxes = []
        for ax, ay, ah, length, width in world(t):
            p = world_to_ego(np.array([[ax, ay]]), np.array([x, y]), yaw)[0]
            boxes.append((float(p[0]), float(p[1]), float(wrap_angle(ah - yaw)), length, width))
        tracker.update(t, (x, y, yaw), boxes)
    got = {round(o.length, 1): o for o in tracker.obstacles_at(1.1, _ego_pose(1.1))}
    assert got[4.5].yaw_rate == pytest.approx(-0.2, abs=1e-3)
    assert got[4.0].yaw_rate == 0.0
    assert got[4.2].yaw_rate == 0.0 and np.hypot(got[4.2].vx, got[4.2].vy) == pytest.approx(5.0, abs=1e-3)
