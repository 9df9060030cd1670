"""One observation recipe: the same recorded stream gives the same Observation whether it goes
through the bag extractor (training), the node's synchroniser (serving) or the world's sample maker."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.io import deserialize, read_messages
from ddrive_ros.bags.reader import extract_samples
from ddrive_ros.observation_recipe import EgoTrack, RecipeError, ego_inputs, match_frames
from ddrive_ros.ros import convert
from ddrive_ros.ros.sync import OdomSample, SyncConfig, Synchronizer
from ddrive_ros.sim.bag_writer import write_bag
from ddrive_ros.sim.sample import make_sample
from ddrive_ros.sim.world import FRAME_DT, Episode
from ddrive_ros.timeline import FRAME_HISTORY_S

SEED = 31


def _assert_same(a, b, what: str) -> None:
    np.testing.assert_array_equal(a.images, b.images, err_msg=f"{what}: images")
    for field in ("speed", "accel", "yaw_rate"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-9), f"{what}: {field}"
    np.testing.assert_allclose(a.past_xy, b.past_xy, atol=1e-9, err_msg=f"{what}: past_xy")
    assert a.nav_command == b.nav_command, f"{what}: nav_command"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    bag = tmp_path_factory.mktemp("recipe") / "bag"
    summary = write_bag(bag, [SEED], duration_s=9.0, progress=False)
    samples, report = extract_samples(bag, progress=False)
    assert samples and report.dropped == 0
    return bag, summary, samples


def test_bag_extractor_and_node_sync_build_equal_observations(recorded):
    bag, _summary, samples = recorded
    anchors = {int(round(s.observation.stamp * 1e9)): s for s in samples}
    sync = Synchronizer(SyncConfig(tolerance_s=0.03, history_s=FRAME_HISTORY_S, max_input_age_s=0.5, camera_buffer=30))
    cams = {T.image_topic(c): c for c in ("left_front", "front", "right_front")}
    checked = 0
    # the node's path: message conversions (convert), buffers and the synchroniser, fed in log order
    pending = sorted(anchors)
    for topic, mtype, t_ns, raw in read_messages(bag, set(cams) | {T.TOPIC_ODOM, T.TOPIC_NAV}):
        # everything stamped at an anchor is in once the first later message arrives: the node plans then
        while pending and t_ns > pending[0]:
            stamp = pending.pop(0)
            obs = sync.build(now=stamp * 1e-9 + 0.01)
            assert obs.stamp == pytest.approx(anchors[stamp].observation.stamp, abs=1e-9)
            _assert_same(obs, anchors[stamp].observation, f"anchor {stamp}")
            checked += 1
        msg = deserialize(raw, mtype)
        if topic == T.TOPIC_ODOM:
            sync.add_odometry(OdomSample(*convert.odometry_to_state(msg)))
        elif topic == T.TOPIC_NAV:
            sync.set_nav_command(msg.data, t_ns * 1e-9)
        else:
            sync.add_image(cams[topic], convert.stamp_to_sec(msg.header.stamp), convert.image_to_rgb(msg))
    assert checked == len(samples) >= 4


def test_world_sample_maker_builds_the_same_observation_as_its_bag(recorded):
    _bag, summary, samples = recorded
    episode = Episode(SEED, 9.0)
    start = summary.episodes[0]["start"]
    for s in samples:
        frame = int(round((s.observation.stamp - start) / FRAME_DT))
        _assert_same(make_sample(episode, frame).observation, s.observation, f"t0 {s.t0}")
        np.testing.assert_allclose(make_sample(episode, frame).future_xy, s.future_xy, atol=1e-9)


def test_ego_inputs_on_a_hand_made_track():
    # accelerating at 2 m/s^2 from 5 m/s heading along +y: past lies straight behind
    t = np.arange(0, 5.0, 0.05)
    track = EgoTrack(t, np.zeros_like(t), 5.0 * t + t * t, np.full_like(t, math.pi / 2), 5.0 + 2.0 * t, np.zeros_like(t))
    speed, accel, yaw_rate, past = ego_inputs(track, 4.0)
    assert speed == pytest.approx(13.0) and accel == pytest.approx(2.0) and yaw_rate == 0.0
    assert np.allclose(past[:, 1], 0.0, atol=1e-9) and np.all(np.diff(past[:, 0]) > 0) and past[-1, 0] < 0
    # beyond the last sample the track moves on at constant speed and heading
    ahead = track.states([t[-1] + 0.1])[0]
    assert ahead[1] == pytest.approx(track.values[-1, 1] + 0.1 * track.values[-1, 3])


def test_a_go_stop_swing_at_half_the_plan_rate_reads_as_no_acceleration():
    # the closed-loop swing docs/closed_loop.md shows: speed +-0.6 m/s about 6 m/s with a 0.4 s period (half the
    # 5 Hz plan rate); a steady 1 m/s^2 on top must still read as 1 m/s^2
    t = np.arange(0, 6.0, 0.05)
    v = 6.0 + 1.0 * t + 0.6 * np.sin(2 * math.pi * t / 0.4)
    track = EgoTrack(t, np.cumsum(v) * 0.05, np.zeros_like(t), np.zeros_like(t), v, np.zeros_like(t))
    reads = [ego_inputs(track, t0)[1] for t0 in np.arange(3.0, 5.0, 0.05)]
    assert max(abs(a - 1.0) for a in reads) < 0.1
    # over one 0.2 s half-period the same swing reads as up to +-6 m/s^2 of acceleration
    assert max(abs((v[k] - v[k - 4]) / 0.2 - 1.0) for k in range(60, 100)) > 5.0


def test_match_frames_reasons():
    stamps = {c: np.arange(0.0, 2.01, 0.1) for c in ("left_front", "front", "right_front")}
    rows = match_frames(stamps, 2.0, 0.02)
    assert rows[0] == pytest.approx([1.5] * 3) and rows[1] == pytest.approx([2.0] * 3)
    with pytest.raises(RecipeError) as e:
        match_frames(stamps, 0.3, 0.02)
    assert e.value.reason == "no_history"
    # a side camera heard from 1.6 s on has no history frame for 2.0 yet; one with a hole at 1.5 misses it
    late = dict(stamps, left_front=stamps["left_front"][16:])
    with pytest.raises(RecipeError) as e:
        match_frames(late, 2.0, 0.02)
    assert e.value.reason == "no_history" and "left_front" in str(e.value)
    holed = dict(stamps, left_front=np.delete(stamps["left_front"], 15))
    with pytest.raises(RecipeError) as e:
        match_frames(holed, 2.0, 0.02)
    assert e.value.reason == "no_match" and "left_front" in str(e.value)
    stamps["left_front"] = stamps["left_front"] + 0.05
    with pytest.raises(RecipeError) as e:
        match_frames(stamps, 2.0, 0.02)
    assert e.value.reason == "no_match"
