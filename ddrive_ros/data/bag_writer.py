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

import argparse
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from tqdm import tqdm

from ddrive_ros.data import bag_topics as T
from ddrive_ros.data.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH, CameraModel
from ddrive_ros.data.image_codec import compressed_to_msg, default_typestore, image_to_msg, make_header
from ddrive_ros.data.labels import HORIZON_STEPS, critical_objects, explanation, meta_behavior
from ddrive_ros.data.render import Renderer
from ddrive_ros.data.sample import episode_seeds
from ddrive_ros.data.world import STEPS_PER_FRAME, Episode
from ddrive_ros.trajectory import yaw_to_quaternion

logger = logging.getLogger(__name__)

NS = 1_000_000_000
# a message hook: (topic, message) -> message to write, or None to drop it (tests use it to corrupt bags)
MessageHook = Callable[[str, Any], Any]


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


class _Out:
    """Connections, serialisation and per-topic counts over a rosbags Writer."""

    def __init__(self, writer, typestore, hook: MessageHook | None) -> None:
        self.writer, self.ts, self.hook = writer, typestore, hook
        self.conns: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    def add(self, topic: str, msgtype: str, qos: list | None = None) -> None:
        kwargs = {"offered_qos_profiles": qos} if qos else {}
        self.conns[topic] = self.writer.add_connection(topic, msgtype, typestore=self.ts, **kwargs)
        self.counts[topic] = 0

    def write(self, topic: str, stamp_ns: int, msg: Any) -> None:
        if self.hook is not None:
            msg = self.hook(topic, msg)
            if msg is None:
                return
        conn = self.conns[topic]
        self.writer.write(conn, int(stamp_ns), self.ts.serialize_cdr(msg, conn.msgtype))
        self.counts[topic] += 1


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
    from rosbags.rosbag2 import StoragePlugin, Writer

    out_dir = Path(out_dir)
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}.get(storage)
    if plugin is None:
        raise ValueError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
    ep_seeds = _resolve_seeds(seeds)
    ts = default_typestore()
    renderer = Renderer(width=width, height=height)
    cams = renderer.cameras
    summary = BagSummary(str(out_dir), storage)
    with Writer(out_dir, version=Writer.VERSION_LATEST, storage_plugin=plugin) as writer:
        out = _Out(writer, ts, on_message)
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


# -- CLI --------------------------------------------------------------------------------------
def _run_make_bag(args: argparse.Namespace) -> int:
    summary = write_bag(args.out, (args.seed, args.episodes), args.compressed, duration_s=args.duration,
                        width=args.width, height=args.height, storage=args.storage)
    counts = ", ".join(f"{topic}: {n}" for topic, n in sorted(summary.messages.items()))
    logger.info("episodes: %d, bag duration %.1f s; %s", len(summary.episodes), summary.duration_s, counts)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `make-bag` to a `ddrive` argparse sub-command set; the handler is in `func`."""
    p = subparsers.add_parser(
        "make-bag", help="simulate episodes of the synthetic world and write them as a ROS 2 bag",
        description="Simulate N episodes (seeded) and write one rosbag2 folder with three camera streams, "
                    "camera_info, /odom, /navigation/command, /ddrive/labels and episode markers.")
    p.add_argument("--episodes", type=int, default=10, help="number of episodes (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed the episode seeds derive from (default 0)")
    p.add_argument("--out", required=True, help="output bag folder; must not exist")
    p.add_argument("--compressed", action="store_true", help="write JPEG CompressedImage instead of raw rgb8")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per episode (default 12, minimum 7)")
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH, help=f"image width (default {DEFAULT_WIDTH})")
    p.add_argument("--height", type=int, default=DEFAULT_HEIGHT, help=f"image height (default {DEFAULT_HEIGHT})")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage plugin")
    p.set_defaults(func=_run_make_bag)
