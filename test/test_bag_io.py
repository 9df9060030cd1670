"""ROS 2 bags both ways: write_bag -> extract_samples, against the world's ground truth and broken bags."""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np
import pytest

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.io import typestore
from ddrive_ros.bags.reader import BagError, extract_samples
from ddrive_ros.commands.make_bag import register
from ddrive_ros.sim.bag_writer import write_bag
from ddrive_ros.bags.image_codec import (
    ImageFormatError,
    compressed_to_msg,
    image_from_msg,
    image_to_msg,
    raw_to_rgb,
    rgb_to_raw,
    stamp_to_ns,
)
from ddrive_ros.sim.sample import samples_from_world
from ddrive_ros.observation import CAMERAS

pytest.importorskip("rosbags")
from rosbags.rosbag2 import Reader  # noqa: E402

SEED, EPISODES, DURATION = 4, 2, 8.0  # 3 anchors per episode (t0 = 2.0, 2.5, 3.0 s)


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bags") / "clean"
    write_bag(out, (SEED, EPISODES), duration_s=DURATION, progress=False)
    return out


@pytest.fixture(scope="module")
def extracted(bag):
    return extract_samples(bag, progress=False)


@pytest.fixture(scope="module")
def world_samples():
    return list(samples_from_world(SEED, EPISODES, duration_s=DURATION, progress=False))


# -- layout -----------------------------------------------------------------------------------
def test_bag_is_a_standard_rosbag2_folder_with_the_documented_topics(bag):
    assert (bag / "metadata.yaml").is_file() and list(bag.glob("*.mcap"))
    ts = typestore()
    with Reader(bag) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        for cam in CAMERAS:
            assert topics[T.image_topic(cam)] == "sensor_msgs/msg/Image"
            assert topics[T.camera_info_topic(cam)] == "sensor_msgs/msg/CameraInfo"
        assert topics[T.TOPIC_ODOM] == "nav_msgs/msg/Odometry"
        assert topics[T.TOPIC_NAV] == topics[T.TOPIC_LABELS] == topics[T.TOPIC_EPISODE] == "std_msgs/msg/String"
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts[T.TOPIC_ODOM] == EPISODES * 161  # 20 Hz over 8 s, both ends included
        assert counts[T.image_topic("front")] == EPISODES * 81  # 10 Hz
        assert counts[T.TOPIC_EPISODE] == 2 * EPISODES
        assert reader.start_time == int(T.BAG_START_S * 1e9)
        seen = set()
        for conn, t_ns, raw in reader.messages():
            if conn.topic in seen or conn.msgtype == "tf2_msgs/msg/TFMessage" or conn.msgtype == "std_msgs/msg/String":
                continue
            seen.add(conn.topic)
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            assert stamp_to_ns(msg.header.stamp) == t_ns  # header stamp == bag timestamp
            if conn.topic == T.TOPIC_ODOM:
                assert msg.header.frame_id == "odom" and msg.child_frame_id == "base_link"
            elif conn.msgtype == "sensor_msgs/msg/Image":
                assert msg.encoding == "rgb8" and msg.header.frame_id.startswith("camera_")
                assert (msg.width, msg.height, msg.step) == (160, 96, 480)


# -- round trip -------------------------------------------------------------------------------
def test_extractor_gives_every_anchor_with_the_right_shapes(extracted):
    samples, report = extracted
    assert len(samples) == 3 * EPISODES and report.samples == len(samples)
    assert report.dropped == 0, report.summary()
    for s in samples:
        s.observation.validate()
        assert s.observation.images.shape == (2, 3, 96, 160, 3)
        assert s.future_xy.shape == (20, 2) and s.observation.past_xy.shape == (4, 2)
        assert all(s.has_labels.values())
        assert s.labels.waypoints.shape == (10, 2)
    assert sorted({s.episode_seed for s in samples}) != [-1]


def test_extractor_matches_the_world_ground_truth(extracted, world_samples):
    samples, _ = extracted
    assert [(s.episode_seed, s.t0) for s in samples] == [(w.episode_seed, w.t0) for w in world_samples]
    for s, w in zip(samples, world_samples):
        assert np.abs(s.future_xy - w.future_xy).max() < 0.01  # 1 cm
        assert np.abs(s.observation.past_xy - w.observation.past_xy).max() < 0.01
        assert s.observation.speed == pytest.approx(w.observation.speed, abs=1e-6)
        assert s.observation.accel == pytest.approx(w.observation.accel, abs=1e-6)
        assert s.observation.yaw_rate == pytest.approx(w.observation.yaw_rate, abs=1e-6)
        assert s.observation.nav_command == w.observation.nav_command
        np.testing.assert_allclose(s.future_yaw, w.future_yaw, atol=1e-6)
        np.testing.assert_array_equal(s.observation.images, w.observation.images)
        assert s.labels.critical_objects == w.labels.critical_objects
        assert s.labels.explanation == w.labels.explanation
        assert s.labels.meta == w.labels.meta


def test_compressed_images_round_trip(tmp_path, world_samples):
    out = tmp_path / "jpeg"
    write_bag(out, [world_samples[0].episode_seed], compressed=True, duration_s=7.0, progress=False)
    with Reader(out) as reader:
        assert {c.topic for c in reader.connections} >= {T.image_topic(c, compressed=True) for c in CAMERAS}
    samples, report = extract_samples(out, progress=False)
    assert len(samples) == 1 and report.dropped == 0, report.summary()
    jpeg, raw = samples[0].observation.images, world_samples[0].observation.images
    assert jpeg.shape == raw.shape and jpeg.dtype == np.uint8
    assert np.abs(jpeg.astype(int) - raw.astype(int)).mean() < 6.0
    assert np.abs(samples[0].future_xy - world_samples[0].future_xy).max() < 0.01


def test_sqlite3_storage_also_round_trips(tmp_path):
    out = tmp_path / "sqlite"
    write_bag(out, [3], duration_s=7.0, storage="sqlite3", progress=False)
    assert list(out.glob("*.db3"))
    samples, report = extract_samples(out, progress=False)
    assert len(samples) == 1 and report.dropped == 0


# -- unlabelled and marker-less bags ----------------------------------------------------------
def test_bag_without_labels_or_episode_markers_still_gives_trajectory_samples(tmp_path):
    out = tmp_path / "bare"

    def strip(topic, msg):
        return None if topic in (T.TOPIC_LABELS, T.TOPIC_EPISODE) else msg

    write_bag(out, [1, 2], duration_s=7.5, progress=False, on_message=strip)
    samples, report = extract_samples(out, progress=False)
    assert len(samples) == 4 and report.episodes == 2  # episodes found from the odometry gap
    for s in samples:
        assert s.has_labels == {"critical_objects": False, "explanation": False, "future_meta_behavior": False,
                                "trajectory": True}
        assert s.labels.meta is None and s.labels.critical_objects == {} and s.labels.explanation == ""
        assert s.episode_seed == -1
    assert report.notes["labels_missing"] == 4 and report.dropped == 0


# -- broken bags ------------------------------------------------------------------------------
def test_truncated_storage_file_gives_a_clear_error(tmp_path, bag):
    out = tmp_path / "truncated"
    out.mkdir()
    for f in bag.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    storage = next(out.glob("*.mcap"))
    os.truncate(storage, storage.stat().st_size // 2)
    try:
        samples, report = extract_samples(out, progress=False)
    except BagError as err:
        assert str(out) in str(err) and "truncated" in str(err)
    else:  # a reader that recovers part of the file must say so
        assert report.counts["storage_error"] >= 1 and len(samples) < 3 * EPISODES


def test_missing_bag_and_missing_metadata_raise(tmp_path):
    with pytest.raises(BagError, match="does not exist"):
        extract_samples(tmp_path / "nope", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagError, match="cannot be opened"):
        extract_samples(tmp_path / "empty", progress=False)


def test_missing_camera_topic_raises_naming_it(tmp_path):
    out = tmp_path / "no_left"
    topic = T.image_topic("left_front")
    write_bag(out, [9], duration_s=7.0, progress=False, on_message=lambda t, m: None if t == topic else m)
    with pytest.raises(BagError, match=topic):
        extract_samples(out, progress=False)


def test_bad_images_and_nan_odometry_are_dropped_and_counted(tmp_path):
    out = tmp_path / "corrupt"
    start = int(T.BAG_START_S * 1e9)
    bad_step_at = start + int(2.5e9)  # front frame of anchors t0 = 2.5 (current) and 3.0 (previous)
    yuv_at = start + int(2.0e9)  # a side frame of anchor t0 = 2.0
    nan_at = {start + int(t * 1e9) for t in (0.35, 4.0, 6.05)}

    def corrupt(topic, msg):
        stamp = stamp_to_ns(msg.header.stamp) if hasattr(msg, "header") else None
        if topic == T.image_topic("front") and stamp == bad_step_at:
            msg.step += 7
        elif topic == T.image_topic("right_front") and stamp == yuv_at:
            msg.encoding = "yuv422"
        elif topic == T.TOPIC_ODOM and stamp in nan_at:
            msg.twist.twist.linear.x = math.nan
            msg.pose.pose.position.x = math.nan
        return msg

    write_bag(out, [21], duration_s=8.0, progress=False, on_message=corrupt)
    samples, report = extract_samples(out, progress=False)
    assert report.counts["image_bad_step"] == 1
    assert report.counts["image_unsupported_encoding"] == 1
    assert report.counts["odom_nonfinite"] == 3
    assert report.counts["sample_bad_image"] == 3  # anchors 2.0, 2.5 and 3.0 each need a bad frame
    assert samples == [] and report.anchors == 3
    assert "image_bad_step" in report.summary()


def test_long_odometry_gap_drops_the_anchor(tmp_path):
    out = tmp_path / "gap"
    start = int(T.BAG_START_S * 1e9)

    def hole(topic, msg):  # 0.4 s without odometry inside the future of every anchor
        if topic == T.TOPIC_ODOM and start + int(5.3e9) <= stamp_to_ns(msg.header.stamp) <= start + int(5.6e9):
            return None
        return msg

    write_bag(out, [2], duration_s=8.0, progress=False, on_message=hole)
    samples, report = extract_samples(out, progress=False)
    assert report.counts["odom_gap"] == 3 and samples == []


# -- image codec ------------------------------------------------------------------------------
def test_image_codec_encodings_and_errors():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)
    for enc in ("rgb8", "bgr8"):
        e, h, w, step, data = rgb_to_raw(rgb, enc)
        assert (e, h, w, step, data.size) == (enc, 6, 5, 15, 90)
        np.testing.assert_array_equal(raw_to_rgb(e, h, w, step, data.tobytes()), rgb)
    e, h, w, step, data = rgb_to_raw(rgb, "mono8")
    grey = raw_to_rgb(e, h, w, step, data)
    assert grey.shape == (6, 5, 3) and np.all(grey[..., 0] == grey[..., 2])
    with pytest.raises(ImageFormatError) as err:
        raw_to_rgb("rgb8", 6, 5, 14, bytes(84))  # a row shorter than its pixels
    assert err.value.reason == "bad_step"
    padded = np.concatenate([rgb, np.zeros((6, 1, 3), np.uint8)], axis=1)  # 16-byte rows: padding is allowed
    np.testing.assert_array_equal(raw_to_rgb("rgb8", 6, 5, 18, padded.tobytes()), rgb)
    with pytest.raises(ImageFormatError) as err:
        raw_to_rgb("rgb8", 6, 5, 15, bytes(80))
    assert err.value.reason == "bad_size"
    with pytest.raises(ImageFormatError) as err:
        raw_to_rgb("16UC1", 6, 5, 10, bytes(60))
    assert err.value.reason == "unsupported_encoding" and isinstance(err.value, ValueError)
    ts = typestore()
    msg = image_to_msg(rgb, 1_500_000_000, "camera_front", ts, encoding="bgr8")
    back = ts.deserialize_cdr(ts.serialize_cdr(msg, "sensor_msgs/msg/Image"), "sensor_msgs/msg/Image")
    np.testing.assert_array_equal(image_from_msg(back), rgb)
    assert stamp_to_ns(back.header.stamp) == 1_500_000_000
    smooth = np.broadcast_to(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (24, 32, 3)).copy()
    cmsg = compressed_to_msg(smooth, 7, "camera_front", ts, quality=95)
    assert cmsg.format.endswith("jpeg compressed bgr8")
    assert np.abs(image_from_msg(cmsg).astype(int) - smooth).mean() < 3
    cmsg.data = cmsg.data[:10]
    with pytest.raises(ValueError):
        image_from_msg(cmsg)


# -- CLI --------------------------------------------------------------------------------------
def test_register_adds_a_working_make_bag_subcommand(tmp_path):
    parser = argparse.ArgumentParser(prog="ddrive")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["make-bag", "--episodes", "1", "--seed", "5", "--out", str(tmp_path / "cli"),
                              "--duration", "7", "--compressed"])
    assert args.func(args) == 0
    samples, _ = extract_samples(tmp_path / "cli", progress=False)
    assert len(samples) == 1
