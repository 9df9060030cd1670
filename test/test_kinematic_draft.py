"""The cold plan's trajectory draft from the ego state (ddrive_ros/kinematic_draft.py)."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros.kinematic_draft import kinematic_ids, kinematic_waypoints

T = 0.5 * np.arange(1, 9)


def test_straight_constant_speed_and_acceleration():
    np.testing.assert_allclose(kinematic_waypoints(10.0, 0.0, 0.0, T), np.column_stack([10.0 * T, 0 * T]), atol=1e-12)
    xy = kinematic_waypoints(10.0, 2.0, 0.0, T)
    np.testing.assert_allclose(xy[:, 0], 10.0 * T + T ** 2, atol=1e-12)


def test_braking_stops_and_holds_and_standing_still_stays_put():
    xy = kinematic_waypoints(4.0, -2.0, 0.0, T)  # stops after 2 s, 4 m on
    np.testing.assert_allclose(xy[T >= 2.0, 0], 4.0, atol=1e-12)
    assert np.all(np.diff(xy[:, 0]) >= 0)
    np.testing.assert_allclose(kinematic_waypoints(0.0, 0.0, 0.3, T), 0.0, atol=1e-12)


def test_turning_follows_the_arc_of_the_yaw_rate():
    v, w = 8.0, 0.4  # radius 20 m, to the left
    xy = kinematic_waypoints(v, 0.0, w, T)
    np.testing.assert_allclose(np.hypot(xy[:, 0], xy[:, 1] - v / w), v / w, atol=1e-9)  # on the circle
    np.testing.assert_allclose(np.arctan2(xy[:, 0], v / w - xy[:, 1]), w * T, atol=1e-9)  # at the arc length
    assert np.all(xy[:, 1] > 0)
    np.testing.assert_allclose(kinematic_waypoints(v, 0.0, -w, T)[:, 1], -xy[:, 1], atol=1e-12)


@pytest.mark.parametrize("schema", ["trajectory_only", "fast_ddrive"])
def test_only_the_trajectory_is_drafted(schema):
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.observation import Observation
    from ddrive_ros.scaffold.codec import Codec
    from ddrive_ros.scaffold.layout import Layout

    bundle = build_random("tiny", schema)
    layout = Layout(bundle.schema, bundle.tokenizer)
    codec = Codec(layout)
    obs = Observation(images=np.zeros((2, 3, 96, 160, 3), np.uint8), past_xy=np.zeros((4, 2)), speed=6.0, accel=0.5,
                      yaw_rate=0.05, nav_command="FOLLOW_LANE", stamp=1.0)
    ids = kinematic_ids(codec, obs)
    mask = bundle.tokenizer.mask_id
    traj = layout.section == bundle.schema.section_names.index("trajectory")
    assert np.all(ids[layout.editable & traj] != mask)
    assert np.all(ids[layout.editable & ~traj] == mask)
    assert np.array_equal(ids[~layout.editable], layout.template_ids[~layout.editable])
    decoded = codec.decode(ids[None][0]) if schema == "trajectory_only" else None
    if decoded is not None:  # the spelled draft reads back as the kinematic waypoints, to the bin
        wf = bundle.schema.waypoint_field()
        expected = kinematic_waypoints(6.0, 0.5, 0.05, wf.dt * np.arange(1, wf.count + 1))
        np.testing.assert_allclose(decoded.waypoints, expected, atol=0.05 + 1e-9)
