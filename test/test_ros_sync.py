"""Unit tests of the node's plain-Python parts: time sync, history buffers, conversions, fallback."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddrive_ros.observation import CAMERAS
from ddrive_ros.ros import convert
from ddrive_ros.ros.sync import (
    FrameBuffer,
    OdomHistory,
    OdomSample,
    SyncConfig,
    SyncError,
    Synchronizer,
    comfortable_stop,
)


def _img(v: int, h: int = 8, w: int = 12) -> np.ndarray:
    return np.full((h, w, 3), v, np.uint8)


def _fill(sync: Synchronizer, t_end: float, cam_dt: float = 0.1, odom_dt: float = 0.05, speed: float = 10.0,
          skip: dict[str, tuple[float, float]] | None = None, jitter: float = 0.0) -> None:
    t = 0.0
    while t <= t_end + 1e-9:
        sync.add_odometry(OdomSample(t, speed * t, 0.0, 0.0, speed, 0.0))
        t += odom_dt
    for i in range(int(round(t_end / cam_dt)) + 1):
        t = i * cam_dt
        for k, cam in enumerate(CAMERAS):
            lo, hi = (skip or {}).get(cam, (1e9, -1e9))
            if lo <= t < hi:
                continue
            sync.add_image(cam, t + (jitter if cam != "front" else 0.0), _img(i % 250, 8, 12))


def test_frame_buffer_bounded_and_ordered():
    buf = FrameBuffer(5)
    for i in range(20):
        assert buf.push(i * 0.1, _img(i))
    assert len(buf) == 5 and buf.latest.stamp == pytest.approx(1.9)
    assert not buf.push(1.0, _img(0))  # older than newest: refused
    assert buf.closest(1.71, 0.05).stamp == pytest.approx(1.7)
    assert buf.closest(0.5, 0.05) is None  # evicted


def test_build_two_frame_observation_anchored_on_front():
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5, max_input_age_s=0.5))
    _fill(sync, 3.0, jitter=0.02)
    obs = sync.build(now=3.1)
    assert obs.images.shape == (2, 3, 8, 12, 3) and obs.images.dtype == np.uint8
    assert obs.stamp == pytest.approx(3.0)
    assert obs.meta["history_stamp"] == pytest.approx(2.5)
    assert obs.images[1, 1, 0, 0, 0] == 30 and obs.images[0, 1, 0, 0, 0] == 25  # frames 30 (t0) and 25 (t0-0.5)
    assert obs.speed == pytest.approx(10.0) and obs.accel == pytest.approx(0.0, abs=1e-6)
    # straight line at 10 m/s: past positions -20, -15, -10, -5 m behind, on the axis
    np.testing.assert_allclose(obs.past_xy, [[-20, 0], [-15, 0], [-10, 0], [-5, 0]], atol=1e-6)
    obs.validate()


def test_a_lost_side_frame_never_sends_the_search_back_past_max_input_age():
    """A side camera's newest frame lost at a jump in time (a new replayed or simulated episode): the search for
    the newest complete set stops at max_input_age_s and says why, instead of handing over a set from before the
    jump (whose stamp the node already planned: it waited silently, for ever)."""
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5, max_input_age_s=0.5, camera_buffer=30))
    _fill(sync, 3.0)
    assert sync.build(now=3.05).stamp == pytest.approx(3.0)
    t0 = 103.0  # 100 s later: the new episode's first 0.5 s, the left camera's last frame lost
    for i in range(6):
        t = t0 + 0.1 * i
        sync.add_odometry(OdomSample(t, 10.0 * t, 0.0, 0.0, 10.0, 0.0))
        for cam in CAMERAS:
            if not (cam == "left_front" and i == 5):
                sync.add_image(cam, t, _img(i, 8, 12))
    sync.add_image("left_front", t0 + 0.6, _img(6, 8, 12))  # the next frame comes: 103.5 is not in flight
    with pytest.raises(SyncError) as e:  # before: the observation at 3.0, a hundred seconds old
        sync.build(now=t0 + 0.6)
    assert e.value.reason == "no_match" and "left_front" in str(e.value)  # the newest fresh anchor says why


def test_side_camera_out_of_tolerance_gives_no_match():
    sync = Synchronizer(SyncConfig(tolerance_s=0.01))
    _fill(sync, 2.0, jitter=0.03)
    with pytest.raises(SyncError) as e:
        sync.build(now=2.05)
    assert e.value.reason == "no_match"


def test_stale_and_missing_inputs():
    sync = Synchronizer(SyncConfig(max_input_age_s=0.5))
    assert set(sync.stale_inputs(0.0)) == {"camera/left_front", "camera/front", "camera/right_front", "odometry"}
    _fill(sync, 3.0, skip={"left_front": (2.0, 9.0)})
    assert sync.stale_inputs(3.05) == ["camera/left_front"]
    with pytest.raises(SyncError) as e:
        sync.build(now=3.05)
    assert e.value.reason == "stale_input"
    # everything goes stale when the clock runs on
    assert len(sync.stale_inputs(10.0)) == 4


def test_no_history_at_startup():
    sync = Synchronizer(SyncConfig(history_s=0.5))
    _fill(sync, 0.3)
    with pytest.raises(SyncError) as e:
        sync.build(now=0.35)
    assert e.value.reason == "no_history"


def test_a_side_camera_heard_later_at_startup_is_warming_up_not_a_sync_failure():
    # discovery matched the front camera 1 s before the left one: for 0.5 s the left camera has no history frame
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5))
    _fill(sync, 1.3, skip={"left_front": (0.0, 1.0)})
    with pytest.raises(SyncError) as e:
        sync.build(now=1.32)
    assert e.value.reason == "no_history" and "left_front" in str(e.value), e.value
    _fill(sync, 1.6, skip={"left_front": (0.0, 1.0)})
    assert sync.build(now=1.62).stamp == pytest.approx(1.6)


def test_side_frames_in_flight_are_waited_for_not_failed():
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5))
    # start-up: the first front frame with a history frame (0.5 s) is in; its side frames are not yet
    _fill(sync, 0.5, skip={"left_front": (0.45, 9.0), "right_front": (0.45, 9.0)})
    with pytest.raises(SyncError) as e:
        sync.build(now=0.52)
    assert e.value.reason == "no_history", e.value  # still warming up, not a sync failure
    # running: the newest set is in flight, the one before it is planned
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5))
    _fill(sync, 2.0, skip={"left_front": (1.95, 9.0)})
    assert sync.build(now=2.02).stamp == pytest.approx(1.9)
    # a side camera that has moved past the anchor without a frame for it: a real miss
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5))
    _fill(sync, 2.0, skip={"left_front": (0.45, 1.95)})
    sync.add_image("left_front", 2.06, _img(0))
    with pytest.raises(SyncError) as e:
        sync.build(now=2.07)
    assert e.value.reason == "no_match" and "left_front" in str(e.value), e.value


def test_a_frame_waits_briefly_for_odometry_that_reaches_its_stamp():
    sync = Synchronizer(SyncConfig(tolerance_s=0.05, history_s=0.5, odom_wait_s=0.03))
    _fill(sync, 2.0)
    # odometry 50 ms behind the newest frame (its sample for 2.05 not in yet), frames through 2.1
    for cam in CAMERAS:
        sync.add_image(cam, 2.1, _img(21))
    assert sync.odom.latest.t == pytest.approx(2.0)
    assert sync.build(now=2.101).stamp == pytest.approx(2.0)  # 2.1 waits; the set before it is complete
    assert sync.build(now=2.15).stamp == pytest.approx(2.1)  # waited long enough: extrapolated
    sync.add_odometry(OdomSample(2.1, 21.0, 0.0, 0.0, 10.0, 0.0))
    obs = sync.build(now=2.102)
    assert obs.stamp == pytest.approx(2.1) and obs.speed == pytest.approx(10.0)
    # nothing but a waiting frame: it says so
    sync = Synchronizer(SyncConfig(history_s=0.0, odom_wait_s=0.03))
    sync.add_odometry(OdomSample(0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    for cam in CAMERAS:
        sync.add_image(cam, 0.05, _img(1))
    with pytest.raises(SyncError, match="waits for odometry"):
        sync.build(now=0.06)


def test_odometry_history_accel_turn_and_nan_dropped():
    hist = OdomHistory(horizon_s=3.0)
    # accelerating at 2 m/s^2 from 5 m/s, heading +90 deg (driving along +y)
    for i in range(100):
        t = i * 0.05
        v = 5.0 + 2.0 * t
        hist.push(OdomSample(t, 0.0, 5.0 * t + t * t, math.pi / 2, v, 0.0))
    assert len(hist) <= 61  # bounded by age
    assert hist.accel_at(4.0) == pytest.approx(2.0, rel=1e-6)
    past = hist.past_xy(4.0)
    # in the ego frame the past lies behind (negative x), on the axis
    assert np.all(past[:, 0] < 0) and np.allclose(past[:, 1], 0.0, atol=1e-9)
    assert past[-1, 0] == pytest.approx(-(5.0 * 0.5 + (4.0 ** 2 - 3.5 ** 2)), rel=1e-6)

    sync = Synchronizer()
    assert not sync.add_odometry(OdomSample(0.0, float("nan"), 0.0, 0.0, 1.0, 0.0))
    assert not sync.add_odometry(OdomSample(0.1, 0.0, 0.0, 0.0, float("inf"), 0.0))
    assert sync.drops.snapshot() == {"nan_odometry": 2}


def test_time_jump_back_resets_buffers():
    sync = Synchronizer()
    _fill(sync, 3.0)
    sync.add_image("front", 0.5, _img(1))
    assert sync.time_jumps == 1 and len(sync.cameras["left_front"]) == 0 and len(sync.cameras["front"]) == 1


def test_unknown_navigation_command_dropped():
    sync = Synchronizer()
    assert sync.set_nav_command("turn_left", 1.0) and sync.nav_command == "TURN_LEFT"
    assert not sync.set_nav_command("FLY", 2.0)
    assert sync.nav_command == "TURN_LEFT" and sync.drops.snapshot() == {"unknown_nav_command": 1}


# ------------------------------------------------------------------ conversions
def _raw(encoding, height, width, step, data):
    from sensor_msgs.msg import Image

    return Image(encoding=encoding, height=height, width=width, step=step, data=bytes(data))


def test_decode_raw_encodings():
    rgb = np.random.default_rng(0).integers(0, 255, (6, 5, 3), dtype=np.uint8)
    np.testing.assert_array_equal(convert.image_to_rgb(_raw("rgb8", 6, 5, 15, rgb.tobytes())), rgb)
    bgr = rgb[..., ::-1].copy()
    np.testing.assert_array_equal(convert.image_to_rgb(_raw("bgr8", 6, 5, 15, bgr.tobytes())), rgb)
    # row padding (step > width * 3) is honoured
    padded = np.concatenate([rgb, np.zeros((6, 1, 3), np.uint8)], axis=1)
    np.testing.assert_array_equal(convert.image_to_rgb(_raw("rgb8", 6, 5, 18, padded.tobytes())), rgb)
    rgba = np.concatenate([rgb, np.full((6, 5, 1), 255, np.uint8)], axis=2)
    np.testing.assert_array_equal(convert.image_to_rgb(_raw("bgra8", 6, 5, 20, rgba[..., [2, 1, 0, 3]].tobytes())), rgb)
    mono = convert.image_to_rgb(_raw("mono8", 6, 5, 5, rgb[..., 0].tobytes()))
    assert mono.shape == (6, 5, 3)


@pytest.mark.parametrize("fields,reason", [
    (("yuv422", 6, 5, 10, b"\0" * 60), "unsupported_encoding"),
    (("rgb8", 6, 5, 15, b"\0" * 80), "bad_size"),  # data length != step * height
    (("rgb8", 6, 5, 12, b"\0" * 72), "bad_step"),  # step < width * 3
    (("rgb8", 6, 5, 22, b"\0" * 90), "bad_step"),  # a step the data does not fit
    (("rgb8", 0, 5, 15, b""), "bad_size"),
])
def test_malformed_images_raise_with_reason(fields, reason):
    with pytest.raises(convert.InvalidMessage) as e:
        convert.image_to_rgb(_raw(*fields))
    assert e.value.reason == reason


def test_compressed_roundtrip_and_garbage():
    from sensor_msgs.msg import CompressedImage

    from ddrive_ros.bags.image_codec import rgb_to_compressed

    rgb = np.zeros((16, 24, 3), np.uint8)
    rgb[..., 0] = 200
    fmt, data = rgb_to_compressed(rgb)
    out = convert.image_to_rgb(CompressedImage(format=fmt, data=data.tobytes()))
    assert out.shape == (16, 24, 3) and abs(int(out[..., 0].mean()) - 200) < 5 and out[..., 2].mean() < 10
    with pytest.raises(convert.InvalidMessage) as e:
        convert.image_to_rgb(CompressedImage(format="jpeg", data=b"not a jpeg"))
    assert e.value.reason == "decode_failed"


def test_odometry_conversion_and_nan():
    from nav_msgs.msg import Odometry

    from ddrive_ros.trajectory import yaw_to_quaternion

    m = Odometry()
    m.header.stamp.sec, m.header.stamp.nanosec = 12, 500_000_000
    m.pose.pose.position.x, m.pose.pose.position.y = 3.0, -1.0
    _, _, m.pose.pose.orientation.z, m.pose.pose.orientation.w = yaw_to_quaternion(0.3)
    m.twist.twist.linear.x, m.twist.twist.angular.z = 7.0, 0.1
    t, x, y, yaw, v, w = convert.odometry_to_state(m)
    assert (t, x, y, v, w) == pytest.approx((12.5, 3.0, -1.0, 7.0, 0.1)) and yaw == pytest.approx(0.3)
    m.twist.twist.linear.x = float("nan")
    with pytest.raises(convert.InvalidMessage) as e:
        convert.odometry_to_state(m)
    assert e.value.reason == "nan_odometry"


def test_obstacle_boxes_round_trip_through_a_marker_array_and_other_frames_are_refused():
    """What `ddrive sim --ros` (or a perception stack) publishes is what the node reads back: a DELETEALL,
    then one CUBE per box; a box in another frame makes the message invalid, with its drop reason."""
    boxes = [(12.0, -3.5, 0.25, 4.5, 1.9), (-6.0, 3.5, -3.0, 0.8, 0.8)]
    msg = convert.obstacles_to_markers(boxes, 1003.25, "base_link")
    assert int(msg.markers[0].action) == 3 and len(msg.markers) == 3  # DELETEALL first
    stamp, back = convert.markers_to_obstacles(msg, "base_link")
    assert stamp == pytest.approx(1003.25)
    assert np.allclose(np.array(back), np.array(boxes), atol=1e-12)
    assert convert.markers_to_obstacles(convert.obstacles_to_markers([], 5.0, "base_link"), "base_link") == (0.0, [])
    with pytest.raises(convert.InvalidMessage) as e:
        convert.markers_to_obstacles(convert.obstacles_to_markers(boxes, 5.0, "map"), "base_link")
    assert e.value.reason == "obstacles_frame"


def test_path_stamps_are_input_stamp_plus_time_from_start():
    traj = np.stack([np.arange(1, 21) * 0.25, np.arange(1, 21) * 2.0, np.zeros(20), np.zeros(20), np.full(20, 8.0)], 1)
    path = convert.trajectory_to_path(traj, 100.1, "base_link")
    assert convert.stamp_to_sec(path.header.stamp) == pytest.approx(100.1)
    assert [convert.stamp_to_sec(p.header.stamp) for p in path.poses] == pytest.approx(100.1 + traj[:, 0])
    assert path.poses[-1].pose.position.x == pytest.approx(40.0) and path.header.frame_id == "base_link"


def test_markers_deleteall_first_and_stable_ids():
    from visualization_msgs.msg import Marker

    from ddrive_ros.ros.markers import plan_markers

    traj = np.stack([np.arange(1, 21) * 0.25, np.arange(1, 21) * 2.0, np.zeros(20), np.zeros(20),
                     np.linspace(0, 15, 20)], 1)
    rollouts = [traj[:, 1:3] + 0.1, traj[:, 1:3] - 0.1]
    ma = plan_markers(traj, traj[::4, 1:3], rollouts, {"longitudinal": "KEEP", "lateral": "STRAIGHT",
                                                       "target_speed": 8.0}, 5.0, "base_link")
    assert ma.markers[0].action == Marker.DELETEALL
    keys = [(m.ns, m.id, m.type) for m in ma.markers[1:]]
    assert keys == [("trajectory", 0, Marker.LINE_STRIP), ("waypoints", 0, Marker.SPHERE_LIST),
                    ("rollouts", 0, Marker.LINE_STRIP), ("rollouts", 1, Marker.LINE_STRIP),
                    ("meta", 0, Marker.TEXT_VIEW_FACING)]
    line = ma.markers[1]
    assert len(line.colors) == len(line.points) == 21 and line.colors[1].b > line.colors[-1].b  # slow blue -> fast red
    assert "KEEP" in ma.markers[-1].text


def test_comfortable_stop_decelerates_along_last_path():
    t = np.arange(1, 21) * 0.25
    traj = np.stack([t, 10.0 * t, 0.5 * t, np.full(20, math.atan2(0.5, 10)), np.full(20, 10.0)], 1)
    stop = comfortable_stop(traj, decel=2.0, v0=10.0)
    assert stop.shape == traj.shape
    np.testing.assert_allclose(stop[:, 4], np.maximum(10.0 - 2.0 * t, 0.0))
    s = np.hypot(stop[:, 1], stop[:, 2])
    assert np.all(np.diff(s) >= -1e-9) and s[-1] == pytest.approx(10.0 * 5 - 0.5 * 2 * 25, rel=1e-6)  # stops at 25 m
    np.testing.assert_allclose(stop[:, 2] / stop[:, 1], 0.05, rtol=1e-6)  # stays on the path


def test_sim_bridge_stamps_key_the_same_on_both_sides_of_the_node():
    """ddrive sim --ros keys each frame's plan by its stamp in milliseconds: the bridge's float stamp and the node's,
    rebuilt from the message's sec + nanosec, must land on the same key for every frame, whatever residue the clock's
    1.1 ms nudges left (offsets with half a millisecond in them did not: a run waited for ever)."""
    from ddrive_ros.ros.sim_bridge import NUDGE_S, START_S, _ns, next_offset

    offset, frames = START_S, 0
    for episode in range(300):
        clock_now = offset + 6.0 + (episode * 7 % 40) * NUDGE_S  # the episode's end plus its last nudges
        offset = next_offset(offset, clock_now)
        assert offset == int(offset) and offset >= clock_now + 100.0
        for k in range(0, 140, 2):  # camera steps: t_rel = k * 0.05
            t = k * 0.05 + offset
            assert _ns(convert.stamp_to_sec(convert.to_stamp(t))) == _ns(t), (episode, k, t)
            frames += 1
    assert frames == 300 * 70
