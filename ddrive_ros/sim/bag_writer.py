"""Write synthetic episodes as a real ROS 2 bag (rosbag2 layout, MCAP storage by default).

One continuous timeline starting at BAG_START_S: episode after episode, EPISODE_GAP_S apart, each
opened and closed by a message on /ddrive/episode. Per episode:

  /camera/<name>/image_raw            sensor_msgs/Image rgb8, 10 Hz   (or .../image_raw/compressed,
                                      sensor_msgs/CompressedImage jpeg, with compressed=True)
  /camera/<name>/camera_info          sensor_msgs/CameraInfo, with every image
  /odom                               nav_msgs/Odometry, 20 Hz: pose of base_link in "odom" (float64,
                                      full precision), twist in base_link (linear.x speed, angular.z yaw rate)
  /navigation/command                 std_msgs/String, 10 Hz, one of NAV_COMMANDS
  /ddrive/labels                      std_msgs/String JSON per camera frame that has 5 s of future
  /ddrive/episode                     std_msgs/String JSON markers
  /tf_static                          tf2_msgs/TFMessage: base_link -> camera_<name> (once, at the start)

Every header.stamp is simulated time and equals the message's bag timestamp.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from ddrive_ros.bags import topics as T
from ddrive_ros.sim.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH, CameraModel
from ddrive_ros.bags.image_codec import compressed_to_msg, image_to_msg, make_header
from ddrive_ros.bags.io import BagWriter, MessageHook, typestore
from ddrive_ros.sim.labels import HORIZON_STEPS, critical_objects, explanation, meta_behavior
from ddrive_ros.sim.render import Renderer
from ddrive_ros.sim.sample import episode_seeds
from ddrive_ros.sim.world import STEPS_PER_FRAME, Episode
from ddrive_ros.trajectory import yaw_to_quaternion

logger = logging.getLogger(__name__)

NS = 1_000_000_000


@dataclass
class BagSummary:
    path: str
    storage: str
    episodes: list[dict] = field(default_factory=list)  # per episode: seed, start/end stamps, kind, command
    messages: dict[str, int] = field(default_factory=dict)  # per topic
    duration_s: float = 0.0


def _resolve_seeds(seeds: Sequence[int] | tuple[int, int]) -> list[int]:
    """A tuple (seed, n_episodes) expands with `episode_seeds`; a list is taken as the episode seeds."""
    if isinstance(seeds, tuple):
        if len(seeds) != 2:
            raise ValueError(f"a tuple means (seed, n_episodes), got {seeds!r}; pass a list for explicit seeds")
        return episode_seeds(int(seeds[0]), int(seeds[1]))
    return [int(s) for s in seeds]


def _string(ts, text: str):
    return ts.types["std_msgs/msg/String"](data=text)


def _odometry(ts, stamp_ns: int, x: float, y: float, yaw: float, v: float, yaw_rate: float):
    t = ts.types
    qx, qy, qz, qw = yaw_to_quaternion(yaw)
    pose = t["geometry_msgs/msg/Pose"](position=t["geometry_msgs/msg/Point"](x=float(x), y=float(y), z=0.0),
                                       orientation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw))
    twist = t["geometry_msgs/msg/Twist"](linear=t["geometry_msgs/msg/Vector3"](x=float(v), y=0.0, z=0.0),
                                         angular=t["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=float(yaw_rate)))
    cov = np.zeros(36)
    cov[[0, 7, 14, 21, 28, 35]] = [1e-4, 1e-4, 1e-6, 1e-6, 1e-6, 1e-4]
    return t["nav_msgs/msg/Odometry"](
        header=make_header(ts, stamp_ns, T.ODOM_FRAME), child_frame_id=T.BASE_FRAME,
        pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=cov.copy()),
        twist=t["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=cov.copy()))


def _camera_info(ts, cam: CameraModel, stamp_ns: int):
    info = cam.camera_info()
    t = ts.types
    return t["sensor_msgs/msg/CameraInfo"](
        header=make_header(ts, stamp_ns, cam.frame_id), height=cam.height, width=cam.width,
        distortion_model=info["distortion_model"], d=np.array(info["d"], dtype=float),
        k=np.array(info["k"], dtype=float), r=np.array(info["r"], dtype=float), p=np.array(info["p"], dtype=float),
        binning_x=0, binning_y=0,
        roi=t["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))


def _tf_static(ts, cams: list[CameraModel], stamp_ns: int):
    t = ts.types
    transforms = []
    for cam in cams:
        qx, qy, qz, qw = cam.mount_quaternion()
        transforms.append(t["geometry_msgs/msg/TransformStamped"](
            header=make_header(ts, stamp_ns, T.BASE_FRAME), child_frame_id=cam.frame_id,
            transform=t["geometry_msgs/msg/Transform"](
                translation=t["geometry_msgs/msg/Vector3"](x=cam.x, y=cam.y, z=cam.z),
                rotation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw))))
    return t["tf2_msgs/msg/TFMessage"](transforms=transforms)


def label_json(episode: Episode, step: int, stamp_s: float, episode_index: int) -> str:
    """The /ddrive/labels payload for the camera frame at `step` (needs 5 s of future)."""
    objects = critical_objects(episode, step)
    meta = meta_behavior(episode, step)
    return json.dumps({
        "schema": "fast_ddrive", "stamp": stamp_s, "episode": episode_index, "seed": episode.seed,
        "critical_objects": objects, "explanation": explanation(episode, step, meta, objects),
        "future_meta_behavior": asdict(meta)})


def _latched_qos() -> list:
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    zero = QosTime(0, 0)
    return [Qos(QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, zero, zero,
                QosLiveliness.AUTOMATIC, zero, False)]


def write_bag(out_dir: str | Path, seeds: Sequence[int] | tuple[int, int], compressed: bool = False, *,
              duration_s: float = 12.0, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
              storage: str = "mcap", jpeg_quality: int = 90, progress: bool = True,
              on_message: MessageHook | None = None) -> BagSummary:
    """Simulate episodes and write them as one rosbag2 folder at `out_dir` (must not exist).

    `seeds`: a list of episode seeds, or a tuple (seed, n_episodes) expanded by `episode_seeds`
    (the same episodes `samples_from_world(seed, n_episodes)` yields). `storage`: "mcap" or "sqlite3".
    """
    out_dir = Path(out_dir)
    ep_seeds = _resolve_seeds(seeds)
    ts = typestore()
    renderer = Renderer(width=width, height=height)
    cams = renderer.cameras
    summary = BagSummary(str(out_dir), storage)
    with BagWriter(out_dir, storage, hook=on_message) as out:
        for cam in cams:
            out.add(T.image_topic(cam.name, compressed), T.COMPRESSED_IMAGE if compressed else T.IMAGE)
            out.add(T.camera_info_topic(cam.name), T.CAMERA_INFO)
        out.add(T.TOPIC_ODOM, T.ODOMETRY)
        out.add(T.TOPIC_NAV, T.STRING)
        out.add(T.TOPIC_LABELS, T.STRING)
        out.add(T.TOPIC_EPISODE, T.STRING)
        out.add(T.TOPIC_TF_STATIC, T.TF_MESSAGE, _latched_qos())
        start_ns = int(round(T.BAG_START_S * NS))
        out.write(T.TOPIC_TF_STATIC, start_ns, _tf_static(ts, cams, start_ns))
        t_ns = start_ns
        for index, seed in enumerate(tqdm(ep_seeds, desc="make-bag", unit="ep", disable=not progress)):
            episode = Episode(seed, duration_s)
            ep_start = t_ns
            step_ns = int(round(episode.dt * NS))
            info = {"episode": index, "seed": seed, "duration_s": duration_s, "kind": episode.scenario.kind,
                    "nav_command": episode.scenario.nav_command, "start": ep_start / NS}
            out.write(T.TOPIC_EPISODE, ep_start, _string(ts, json.dumps({"event": "start", **info})))
            for k in range(episode.n_steps):
                stamp = ep_start + k * step_ns
                out.write(T.TOPIC_ODOM, stamp, _odometry(ts, stamp, *episode.ego_xy[k], episode.ego_yaw[k],
                                                         episode.ego_v[k], episode.ego_yaw_rate[k]))
                if k % STEPS_PER_FRAME:
                    continue
                images = renderer.render(episode, k)
                for cam, rgb in zip(cams, images):
                    msg = (compressed_to_msg(rgb, stamp, cam.frame_id, ts, quality=jpeg_quality) if compressed
                           else image_to_msg(rgb, stamp, cam.frame_id, ts))
                    out.write(T.image_topic(cam.name, compressed), stamp, msg)
                    out.write(T.camera_info_topic(cam.name), stamp, _camera_info(ts, cam, stamp))
                out.write(T.TOPIC_NAV, stamp, _string(ts, str(episode.nav_command[k])))
                if k + HORIZON_STEPS < episode.n_steps:
                    out.write(T.TOPIC_LABELS, stamp, _string(ts, label_json(episode, k, stamp / NS, index)))
            ep_end = ep_start + (episode.n_steps - 1) * step_ns
            out.write(T.TOPIC_EPISODE, ep_end, _string(ts, json.dumps({"event": "end", **info, "end": ep_end / NS})))
            summary.episodes.append({**info, "end": ep_end / NS})
            t_ns = ep_end + int(round(T.EPISODE_GAP_S * NS))
        summary.messages = dict(out.counts)
    summary.duration_s = (summary.episodes[-1]["end"] - T.BAG_START_S) if summary.episodes else 0.0
    logger.info("wrote %s: %d episodes, %.1f s, %d messages", out_dir, len(ep_seeds), summary.duration_s,
                sum(summary.messages.values()))
    return summary
