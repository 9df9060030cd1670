"""Small rosbag2 helpers over rosbags + rclpy serialization (no ROS 2 CLI needed).

- `msg_class('sensor_msgs/msg/Image')` -> the rclpy message class.
- `BagOut`: write rclpy messages (or CDR bytes) into a rosbag2 folder.
- `write_simple_bag(...)`: a self-contained synthetic drive (an arc at constant speed, procedural
  camera images) with optional faults, for tests and as the demo's fallback when the synthetic world's
  bag writer (ddrive_ros.data) is not available.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ddrive_ros.observation import CAMERAS
from ddrive_ros.ros import convert
from ddrive_ros.trajectory import yaw_to_quaternion


def msg_class(msgtype: str):
    pkg, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def typestore():
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


class BagOut:
    """rosbag2 writer taking rclpy messages or CDR bytes."""

    def __init__(self, path: str | Path):
        from rosbags.rosbag2 import Writer

        self.path = Path(path)
        if self.path.exists():
            import shutil

            shutil.rmtree(self.path)
        self.writer = Writer(self.path, version=8)
        self.writer.open()
        self.store = typestore()
        self.conns: dict[str, Any] = {}

    def write(self, topic: str, msgtype: str, t_ns: int, msg: Any) -> None:
        from rclpy.serialization import serialize_message

        if topic not in self.conns:
            self.conns[topic] = self.writer.add_connection(topic, msgtype, typestore=self.store)
        data = msg if isinstance(msg, (bytes, bytearray, memoryview)) else serialize_message(msg)
        self.writer.write(self.conns[topic], int(t_ns), bytes(data))

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "BagOut":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_bag(path: str | Path, topics: set[str] | None = None) -> Iterator[tuple[str, str, int, bytes]]:
    """(topic, msgtype, t_ns, cdr bytes) in log-time order."""
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, t_ns, raw in reader.messages(connections=conns):
            yield conn.topic, conn.msgtype, t_ns, bytes(raw)


def bag_topics(path: str | Path) -> dict[str, str]:
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


# ---------------------------------------------------------------------------------- synthetic bag
@dataclass
class Faults:
    silent_camera: str | None = None  # a camera that publishes nothing in [silent_from, silent_to)
    silent_from: float = 0.0
    silent_to: float = 0.0
    malformed_images: list[float] = field(default_factory=list)  # times of right_front frames with a bad step
    bad_encoding_images: list[float] = field(default_factory=list)  # times of right_front frames with 'yuv422'
    nan_odometry: list[float] = field(default_factory=list)  # times of odometry messages with NaN


def _procedural_image(t: float, cam_index: int, h: int, w: int, x_world: float) -> np.ndarray:
    img = np.empty((h, w, 3), np.uint8)
    horizon = h // 2
    img[:horizon] = (120, 170, 230)
    img[horizon:] = (90, 90, 90)
    cols = np.arange(w)
    phase = int(x_world * 8 + cam_index * 37) % 40
    stripe = ((cols + phase) // 10) % 4 == 0
    img[horizon + h // 4: horizon + h // 4 + 2, stripe] = (240, 240, 240)
    img[horizon - 6: horizon, (cols + int(t * 20)) % 50 < 8] = (30, 120, 30)
    return img


def write_simple_bag(out: str | Path, duration_s: float = 6.0, camera_hz: float = 10.0, odom_hz: float = 20.0,
                     speed: float = 8.0, yaw_rate: float = 0.05, width: int = 160, height: int = 96,
                     start_s: float = 100.0, compressed: bool = False, faults: Faults | None = None,
                     nav_command: str = "FOLLOW_LANE") -> Path:
    """Ego on an arc at constant speed from t=start_s for duration_s; cameras, odometry, nav, camera_info."""
    from builtin_interfaces.msg import Time  # noqa: F401 - make sure the messages import
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image
    from std_msgs.msg import String

    faults = faults or Faults()
    events: list[tuple[float, int, str, str, Any]] = []  # (t, order, topic, msgtype, msg)

    def pose(t: float) -> tuple[float, float, float]:
        yaw = yaw_rate * t
        if abs(yaw_rate) < 1e-9:
            return speed * t, 0.0, 0.0
        r = speed / yaw_rate
        return r * math.sin(yaw), r * (1 - math.cos(yaw)), yaw

    n_odom = int(duration_s * odom_hz) + 1
    for i in range(n_odom):
        tr = i / odom_hz
        t = start_s + tr
        x, y, yaw = pose(tr)
        m = Odometry()
        m.header.stamp = convert.to_stamp(t)
        m.header.frame_id, m.child_frame_id = "odom", "base_link"
        m.pose.pose.position.x, m.pose.pose.position.y = x, y
        qx, qy, qz, qw = yaw_to_quaternion(yaw)
        m.pose.pose.orientation.z, m.pose.pose.orientation.w = qz, qw
        m.twist.twist.linear.x, m.twist.twist.angular.z = speed, yaw_rate
        if any(abs(tr - tf) < 0.5 / odom_hz for tf in faults.nan_odometry):
            m.pose.pose.position.x = float("nan")
        events.append((t, 0, "/odom", "nav_msgs/msg/Odometry", m))

    n_cam = int(duration_s * camera_hz) + 1
    for i in range(n_cam):
        tr = i / camera_hz
        t = start_s + tr
        x = pose(tr)[0]
        for ci, cam in enumerate(CAMERAS):
            if cam == faults.silent_camera and faults.silent_from <= tr < faults.silent_to:
                continue
            rgb = _procedural_image(tr, ci, height, width, x)
            frame = f"camera_{cam}"
            if compressed:
                msg = CompressedImage(format="jpeg", data=convert.rgb_to_jpeg(rgb))
                topic, mtype = f"/camera/{cam}/image_raw/compressed", "sensor_msgs/msg/CompressedImage"
            else:
                msg = Image(**convert.rgb_to_image_fields(rgb))
                topic, mtype = f"/camera/{cam}/image_raw", "sensor_msgs/msg/Image"
                if cam == "right_front" and any(abs(tr - tf) < 0.5 / camera_hz for tf in faults.malformed_images):
                    msg.step = width * 3 + 7  # step no longer matches the data
                if cam == "right_front" and any(abs(tr - tf) < 0.5 / camera_hz for tf in faults.bad_encoding_images):
                    msg.encoding = "yuv422"
            msg.header.stamp = convert.to_stamp(t)
            msg.header.frame_id = frame
            events.append((t, 1 + ci, topic, mtype, msg))
            if i % int(max(camera_hz, 1)) == 0:
                info = CameraInfo(width=width, height=height)
                info.header = msg.header
                f = (width / 2.0) / math.tan(math.radians(90 if cam != "front" else 60) / 2.0)
                info.k = [f, 0.0, width / 2.0, 0.0, f, height / 2.0, 0.0, 0.0, 1.0]
                events.append((t, 5, f"/camera/{cam}/camera_info", "sensor_msgs/msg/CameraInfo", info))
    for k in range(int(duration_s) + 1):
        events.append((start_s + k, 9, "/navigation/command", "std_msgs/msg/String", String(data=nav_command)))
    events.sort(key=lambda e: (e[0], e[1]))
    out = Path(out)
    with BagOut(out) as bag:
        for t, _, topic, mtype, msg in events:
            bag.write(topic, mtype, int(round(t * 1e9)), msg)
    return out
