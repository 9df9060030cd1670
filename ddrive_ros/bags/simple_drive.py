"""A small self-contained drive as a rosbag2 folder, for node tests: an arc at constant speed with
procedural camera images, at chosen rates and resolution, with optional faults (a silent camera,
malformed or wrongly encoded frames, NaN odometry). No synthetic world, no rclpy."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.image_codec import compressed_to_msg, image_to_msg, make_header
from ddrive_ros.bags.io import BagWriter, typestore
from ddrive_ros.observation import CAMERAS
from ddrive_ros.trajectory import yaw_to_quaternion

NS = 1_000_000_000


@dataclass
class Faults:
    silent_camera: str | None = None  # a camera that publishes nothing in [silent_from, silent_to)
    silent_from: float = 0.0
    silent_to: float = 0.0
    malformed_images: list[float] = field(default_factory=list)  # times of right_front frames with a bad step
    bad_encoding_images: list[float] = field(default_factory=list)  # times of right_front frames with 'yuv422'
    nan_odometry: list[float] = field(default_factory=list)  # times of odometry messages with NaN


def procedural_image(t: float, cam_index: int, h: int, w: int, x_world: float) -> np.ndarray:
    """Sky, road, moving lane dashes and a tree line: cheap pixels that change with the pose."""
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


def _near(t: float, times: list[float], hz: float) -> bool:
    return any(abs(t - tf) < 0.5 / hz for tf in times)


def write_simple_bag(out: str | Path, duration_s: float = 6.0, camera_hz: float = 10.0, odom_hz: float = 20.0,
                     speed: float = 8.0, yaw_rate: float = 0.05, width: int = 160, height: int = 96,
                     start_s: float = 100.0, compressed: bool = False, faults: Faults | None = None,
                     nav_command: str = "FOLLOW_LANE", storage: str = "mcap") -> Path:
    """Ego on an arc at constant speed from t=start_s for duration_s; cameras, odometry, nav, camera_info."""
    faults = faults or Faults()
    ts = typestore()
    ty = ts.types
    events: list[tuple[float, int, str, str, object]] = []  # (t, order, topic, msgtype, msg)

    def pose(t: float) -> tuple[float, float, float]:
        yaw = yaw_rate * t
        if abs(yaw_rate) < 1e-9:
            return speed * t, 0.0, 0.0
        r = speed / yaw_rate
        return r * math.sin(yaw), r * (1 - math.cos(yaw)), yaw

    for i in range(int(duration_s * odom_hz) + 1):
        tr = i / odom_hz
        t_ns = int(round((start_s + tr) * NS))
        x, y, yaw = pose(tr)
        if _near(tr, faults.nan_odometry, odom_hz):
            x = float("nan")
        qx, qy, qz, qw = yaw_to_quaternion(yaw)
        msg = ty[T.ODOMETRY](
            header=make_header(ts, t_ns, T.ODOM_FRAME), child_frame_id=T.BASE_FRAME,
            pose=ty["geometry_msgs/msg/PoseWithCovariance"](
                pose=ty["geometry_msgs/msg/Pose"](position=ty["geometry_msgs/msg/Point"](x=x, y=y, z=0.0),
                                                  orientation=ty["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw)),
                covariance=np.zeros(36)),
            twist=ty["geometry_msgs/msg/TwistWithCovariance"](
                twist=ty["geometry_msgs/msg/Twist"](linear=ty["geometry_msgs/msg/Vector3"](x=speed, y=0.0, z=0.0),
                                                    angular=ty["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=yaw_rate)),
                covariance=np.zeros(36)))
        events.append((start_s + tr, 0, T.TOPIC_ODOM, T.ODOMETRY, msg))

    for i in range(int(duration_s * camera_hz) + 1):
        tr = i / camera_hz
        t_ns = int(round((start_s + tr) * NS))
        x = pose(tr)[0]
        for ci, cam in enumerate(CAMERAS):
            if cam == faults.silent_camera and faults.silent_from <= tr < faults.silent_to:
                continue
            rgb = procedural_image(tr, ci, height, width, x)
            frame = T.camera_frame(cam)
            if compressed:
                msg = compressed_to_msg(rgb, t_ns, frame, ts)
                mtype = T.COMPRESSED_IMAGE
            else:
                msg = image_to_msg(rgb, t_ns, frame, ts)
                mtype = T.IMAGE
                if cam == "right_front" and _near(tr, faults.malformed_images, camera_hz):
                    msg.step = width * 3 + 7  # step no longer matches the data
                if cam == "right_front" and _near(tr, faults.bad_encoding_images, camera_hz):
                    msg.encoding = "yuv422"
            events.append((start_s + tr, 1 + ci, T.image_topic(cam, compressed), mtype, msg))
            if i % int(max(camera_hz, 1)) == 0:
                f = (width / 2.0) / math.tan(math.radians(90 if cam != "front" else 60) / 2.0)
                k = np.array([f, 0.0, width / 2.0, 0.0, f, height / 2.0, 0.0, 0.0, 1.0])
                info = ty[T.CAMERA_INFO](
                    header=make_header(ts, t_ns, frame), height=height, width=width, distortion_model="plumb_bob",
                    d=np.zeros(5), k=k, r=np.eye(3).ravel(), p=np.concatenate([k[:3], [0], k[3:6], [0], k[6:], [0]]),
                    binning_x=0, binning_y=0,
                    roi=ty["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0,
                                                                do_rectify=False))
                events.append((start_s + tr, 5, T.camera_info_topic(cam), T.CAMERA_INFO, info))
    for k in range(int(duration_s) + 1):
        events.append((start_s + k, 9, T.TOPIC_NAV, T.STRING, ty[T.STRING](data=nav_command)))
    events.sort(key=lambda e: (e[0], e[1]))
    out = Path(out)
    with BagWriter(out, storage, overwrite=True) as bag:
        for t, _, topic, mtype, msg in events:
            bag.write(topic, int(round(t * NS)), msg, msgtype=mtype)
    return out
