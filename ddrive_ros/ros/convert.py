"""ROS message <-> numpy conversions for the planner node (the "interface" layer).

Pixel decoding is written over plain fields (encoding, height, width, step, data) so the bag tools
and the node share it. Message construction imports the ROS message packages lazily only where a
message is built; parsing works on any object with the usual attributes (rclpy or rosbags messages).
"""
from __future__ import annotations

import importlib
import json
import math
from typing import Any

import numpy as np

from ddrive_ros.observation_recipe import to_model_size
from ddrive_ros.trajectory import ego_to_world, quaternion_to_yaw, yaw_to_quaternion

from ddrive_ros.bags import image_codec


class InvalidMessage(ValueError):
    """A message that cannot be used; `reason` is the drop-counter key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


# ------------------------------------------------------------------ time
def stamp_to_sec(stamp: Any) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def sec_to_stamp_fields(t: float) -> tuple[int, int]:
    ns = int(round(t * 1e9))
    return ns // 1_000_000_000, ns % 1_000_000_000


def to_stamp(t: float):
    from builtin_interfaces.msg import Time

    sec, nanosec = sec_to_stamp_fields(t)
    return Time(sec=sec, nanosec=nanosec)


# ------------------------------------------------------------------ images
def image_to_rgb(msg: Any, size: tuple[int, int] | None = None, full_hw: tuple[int, int] | None = None) -> np.ndarray:
    """sensor_msgs/Image or sensor_msgs/CompressedImage -> (H, W, 3) uint8 RGB (the bag tools' codec),
    at the model's input size (h, w) when `size` is given (the recipe's resize). `full_hw`, the
    camera's resolution seen before, lets a JPEG be decoded at a reduced size first. Raises
    InvalidMessage whose reason is the codec's (unsupported_encoding, bad_step, bad_size, decode_failed)."""
    try:
        if hasattr(msg, "encoding"):
            rgb = image_codec.raw_to_rgb(msg.encoding, int(msg.height), int(msg.width), int(msg.step), msg.data)
        else:
            k = image_codec.reduction_for(full_hw, size) if (size and full_hw) else 1
            rgb = image_codec.compressed_to_rgb(getattr(msg, "format", ""), msg.data, reduce=k)
    except image_codec.ImageFormatError as e:
        raise InvalidMessage(e.reason, str(e)) from e
    return to_model_size(rgb, size)


def msg_class(msgtype: str):
    """The rclpy message class of a type name such as 'sensor_msgs/msg/Image'."""
    pkg, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


# ------------------------------------------------------------------ obstacles
def markers_to_obstacles(msg: Any, ego_frame_id: str) -> tuple[float, list[tuple[float, ...]]]:
    """visualization_msgs/MarkerArray of CUBE markers in the ego frame -> (newest stamp, boxes
    (x, y, yaw, length, width)). Other marker types (text, arrows, DELETEALL) are skipped; a box in
    another frame, or with a non-finite pose or non-positive size, makes the whole message invalid."""
    cube, delete_all = 1, 3
    stamp, boxes = 0.0, []
    for m in msg.markers:
        if int(m.action) == delete_all or int(m.type) != cube:
            continue
        if m.header.frame_id != ego_frame_id:
            raise InvalidMessage("obstacles_frame", f"box {m.ns}/{m.id} in frame {m.header.frame_id!r}, "
                                                    f"expected the ego frame {ego_frame_id!r}")
        p, q = m.pose.position, m.pose.orientation
        vals = (p.x, p.y, q.x, q.y, q.z, q.w, m.scale.x, m.scale.y)
        if not all(math.isfinite(v) for v in vals) or m.scale.x <= 0 or m.scale.y <= 0:
            raise InvalidMessage("bad_obstacle", f"box {m.ns}/{m.id}: non-finite pose or non-positive size")
        yaw = quaternion_to_yaw(q.x, q.y, q.z, q.w) if q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w > 1e-12 else 0.0
        boxes.append((float(p.x), float(p.y), float(yaw), float(m.scale.x), float(m.scale.y)))
        stamp = max(stamp, stamp_to_sec(m.header.stamp))
    return stamp, boxes


def obstacles_to_markers(boxes: list[tuple[float, ...]] | tuple, stamp: float, frame_id: str,
                         height: float = 1.5, ns: str = "obstacles"):
    """(x, y, yaw, length, width) boxes in `frame_id` -> visualization_msgs/MarkerArray: a DELETEALL
    first (RViz forgets the previous set), then one CUBE per box, all stamped `stamp`; the inverse of
    markers_to_obstacles, what a perception stack (or `ddrive sim --ros`) publishes on ~/input/obstacles."""
    from visualization_msgs.msg import Marker, MarkerArray

    clear = Marker()
    clear.header.frame_id, clear.header.stamp = frame_id, to_stamp(stamp)
    clear.ns, clear.action = ns, Marker.DELETEALL
    markers = [clear]
    for i, (x, y, yaw, length, width) in enumerate(boxes):
        m = Marker()
        m.header.frame_id, m.header.stamp = frame_id, to_stamp(stamp)
        m.ns, m.id, m.type, m.action = ns, i, Marker.CUBE, Marker.ADD
        m.pose.position.x, m.pose.position.y, m.pose.position.z = float(x), float(y), height / 2
        o = m.pose.orientation
        o.x, o.y, o.z, o.w = yaw_to_quaternion(float(yaw))
        m.scale.x, m.scale.y, m.scale.z = float(length), float(width), float(height)
        m.color.r, m.color.g, m.color.b, m.color.a = 1.0, 0.55, 0.0, 0.6
        markers.append(m)
    return MarkerArray(markers=markers)


# ------------------------------------------------------------------ odometry
def odometry_to_state(msg: Any) -> tuple[float, float, float, float, float, float]:
    """nav_msgs/Odometry -> (t, x, y, yaw, v, yaw_rate); twist is in the body frame (child_frame_id)."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    tw = msg.twist.twist
    vals = (p.x, p.y, q.x, q.y, q.z, q.w, tw.linear.x, tw.linear.y, tw.angular.z)
    if not all(math.isfinite(v) for v in vals):
        raise InvalidMessage("nan_odometry", "non-finite pose or twist")
    if q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w < 1e-12:
        raise InvalidMessage("nan_odometry", "zero quaternion")
    yaw = quaternion_to_yaw(q.x, q.y, q.z, q.w)
    v = math.copysign(math.hypot(tw.linear.x, tw.linear.y), tw.linear.x if tw.linear.x != 0 else 1.0)
    return stamp_to_sec(msg.header.stamp), float(p.x), float(p.y), float(yaw), float(v), float(tw.angular.z)


# ------------------------------------------------------------------ plan -> messages
def trajectory_to_path(trajectory: np.ndarray, stamp: float, frame_id: str):
    """(N, 5) t, x, y, yaw, v -> nav_msgs/Path; pose stamps = stamp + t."""
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Path

    msg = Path()
    msg.header.stamp = to_stamp(stamp)
    msg.header.frame_id = frame_id
    for t, x, y, yaw, _v in np.asarray(trajectory, dtype=float):
        ps = PoseStamped()
        ps.header.stamp = to_stamp(stamp + t)
        ps.header.frame_id = frame_id
        ps.pose.position.x, ps.pose.position.y = float(x), float(y)
        qx, qy, qz, qw = yaw_to_quaternion(yaw)
        ps.pose.orientation.x, ps.pose.orientation.y, ps.pose.orientation.z, ps.pose.orientation.w = qx, qy, qz, qw
        msg.poses.append(ps)
    return msg


def trajectory_rates(trajectory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(acceleration m/s^2, heading rate rad/s) at each row of (N, 5) t, x, y, yaw, v: finite
    differences over time (second order inside, one-sided at the ends)."""
    traj = np.asarray(trajectory, dtype=float)
    if len(traj) < 2:
        return np.zeros(len(traj)), np.zeros(len(traj))
    t = traj[:, 0]
    return np.gradient(traj[:, 4], t), np.gradient(np.unwrap(traj[:, 3]), t)


def to_frame(trajectory: np.ndarray, pose: tuple[float, float, float]) -> np.ndarray:
    """(N, 5) t, x, y, yaw, v from the ego frame into the frame where the ego stands at pose
    (x, y, yaw): the odometry frame, with the odometry pose at the plan's input stamp."""
    traj = np.array(trajectory, dtype=float, copy=True)
    if len(traj):
        traj[:, 1:3] = ego_to_world(traj[:, 1:3], pose[:2], float(pose[2]))
        traj[:, 3] = traj[:, 3] + float(pose[2])
    return traj


def points_to_frame(xy: np.ndarray | None, pose: tuple[float, float, float] | None) -> np.ndarray | None:
    if xy is None or pose is None or not len(xy):
        return xy
    return ego_to_world(np.asarray(xy, dtype=float)[:, :2], pose[:2], float(pose[2]))


def autoware_available() -> bool:
    try:
        import autoware_planning_msgs.msg  # noqa: F401
    except ImportError:
        return False
    return True


def trajectory_to_autoware(trajectory: np.ndarray, stamp: float, frame_id: str):
    """autoware_planning_msgs/Trajectory with speed, acceleration and heading rate per point.
    Call only when `autoware_available()`; the node decides once at start."""
    from autoware_planning_msgs.msg import Trajectory, TrajectoryPoint
    from builtin_interfaces.msg import Duration

    traj = np.asarray(trajectory, dtype=float)
    accel, heading_rate = trajectory_rates(traj)
    msg = Trajectory()
    msg.header.stamp = to_stamp(stamp)
    msg.header.frame_id = frame_id
    for (t, x, y, yaw, v), a, w in zip(traj, accel, heading_rate):
        pt = TrajectoryPoint()
        sec, ns = sec_to_stamp_fields(t)
        pt.time_from_start = Duration(sec=sec, nanosec=ns)
        pt.pose.position.x, pt.pose.position.y = float(x), float(y)
        qx, qy, qz, qw = yaw_to_quaternion(yaw)
        pt.pose.orientation.z, pt.pose.orientation.w = qz, qw
        pt.longitudinal_velocity_mps = float(v)
        pt.acceleration_mps2 = float(a)
        pt.heading_rate_rps = float(w)
        msg.points.append(pt)
    return msg


def float64(value: float):
    from std_msgs.msg import Float64

    return Float64(data=float(value))


def json_string(obj: Any):
    from std_msgs.msg import String

    return String(data=json.dumps(obj, separators=(",", ":"), default=_json_default))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
