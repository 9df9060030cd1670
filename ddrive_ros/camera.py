"""Pinhole cameras mounted on the ego: intrinsics, extrinsics, projection, CameraInfo data.

Generic (no world, no ROS): the synthetic world's rig (`ddrive_ros.sim.camera.default_cameras`)
and a bag's own calibration (`ddrive_ros.bags.calibration.cameras_from_bag`: CameraInfo + /tf_static)
both give `CameraModel`s, so drawing a plan into a camera never needs to know where the images came from.

Frames: points come in the ego frame (base_link: x forward, y left, z up). The camera's own frame
`camera_<name>` is the optical frame of REP 103 (z forward, x right, y down), which is what
sensor_msgs/Image headers name.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# body axes -> optical axes: x_opt = -y_body, y_opt = -z_body, z_opt = x_body (columns: optical axes in body)
_BODY_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True)
class CameraModel:
    name: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    x: float  # mount position in base_link, m
    y: float
    z: float
    yaw: float = 0.0  # rad, left positive (ignored when mount_rotation is given)
    pitch: float = 0.0  # rad, down positive (ignored when mount_rotation is given)
    near: float = 0.3  # m, near clipping plane
    mount_rotation: tuple[float, ...] | None = None  # R_ego_optical row-major (9), e.g. from /tf_static

    @property
    def frame_id(self) -> str:
        return f"camera_{self.name}"

    @property
    def hfov(self) -> float:
        return 2.0 * float(np.arctan(self.width / (2.0 * self.fx)))

    @cached_property
    def rotation(self) -> np.ndarray:
        """R_ego_optical: columns are the optical axes in the ego frame."""
        if self.mount_rotation is not None:
            return np.asarray(self.mount_rotation, dtype=float).reshape(3, 3)
        cy_, sy_ = np.cos(self.yaw), np.sin(self.yaw)
        cp, sp = np.cos(self.pitch), np.sin(self.pitch)
        rz = np.array([[cy_, -sy_, 0.0], [sy_, cy_, 0.0], [0.0, 0.0, 1.0]])
        ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
        return rz @ ry @ _BODY_FROM_OPTICAL

    @property
    def position(self) -> np.ndarray:
        return np.array([self.x, self.y, self.z])

    def to_camera(self, points_ego: np.ndarray) -> np.ndarray:
        """(..., 3) ego-frame points in the optical frame."""
        return (np.asarray(points_ego, dtype=float) - self.position) @ self.rotation

    def project_camera(self, pc: np.ndarray) -> np.ndarray:
        """Pixel coordinates of optical-frame points (callers make sure z > 0)."""
        z = np.maximum(pc[..., 2], 1e-6)
        return np.stack([self.fx * pc[..., 0] / z + self.cx, self.fy * pc[..., 1] / z + self.cy], axis=-1)

    def project(self, points_ego: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(uv (N, 2) pixels, in_front (N,) bool: beyond the near plane). uv of points behind is meaningless."""
        pc = self.to_camera(points_ego)
        return self.project_camera(pc), pc[..., 2] > self.near

    def in_image(self, points_ego: np.ndarray) -> np.ndarray:
        uv, front = self.project(points_ego)
        return front & (uv[..., 0] >= 0) & (uv[..., 0] < self.width) & (uv[..., 1] >= 0) & (uv[..., 1] < self.height)

    @property
    def horizon_v(self) -> float:
        """Image row of the horizon (no roll, so it is one row)."""
        return float(self.cy - self.fy * np.tan(self.pitch))

    def camera_info(self) -> dict:
        """Fields of a sensor_msgs/CameraInfo (undistorted pinhole)."""
        k = [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0]
        p = [self.fx, 0.0, self.cx, 0.0, 0.0, self.fy, self.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        return {"frame_id": self.frame_id, "width": self.width, "height": self.height,
                "distortion_model": "plumb_bob", "d": [0.0] * 5, "k": k,
                "r": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], "p": p}

    def mount_quaternion(self) -> tuple[float, float, float, float]:
        """Rotation base_link -> camera optical frame as a quaternion (x, y, z, w), for /tf_static."""
        return rotation_to_quaternion(self.rotation)


def rotation_to_quaternion(r: np.ndarray) -> tuple[float, float, float, float]:
    """Unit quaternion (x, y, z, w) of a rotation matrix (Shepperd's method, branch on the largest term)."""
    tr = float(np.trace(r))
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        v = [0.0, 0.0, 0.0]
        v[i] = 0.25 * s
        v[j] = (r[j, i] + r[i, j]) / s
        v[k] = (r[k, i] + r[i, k]) / s
        q = (v[0], v[1], v[2], (r[k, j] - r[j, k]) / s)
    q = np.array(q, dtype=float)
    q /= np.linalg.norm(q)
    return tuple(float(x) for x in q)  # type: ignore[return-value]


def quaternion_to_rotation(x: float, y: float, z: float, w: float) -> np.ndarray:
    """3x3 rotation matrix of a unit quaternion (x, y, z, w)."""
    n = np.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
