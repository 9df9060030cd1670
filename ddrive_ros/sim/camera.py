"""The synthetic world's three-camera rig (mounts and fields of view), as generic `CameraModel`s."""
from __future__ import annotations

import numpy as np

from ddrive_ros.camera import CameraModel, rotation_to_quaternion  # noqa: F401 - the world's camera type
from ddrive_ros.observation import CAMERAS

DEFAULT_WIDTH, DEFAULT_HEIGHT = 160, 96

# name -> (horizontal FOV deg, mount x, y, z, yaw deg, pitch deg)
_RIG = {
    "left_front": (100.0, 2.0, 0.8, 1.40, 55.0, 5.0),
    "front": (70.0, 1.9, 0.0, 1.45, 0.0, 3.0),
    "right_front": (100.0, 2.0, -0.8, 1.40, -55.0, 5.0),
}


def default_cameras(width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> list[CameraModel]:
    """The three-camera rig in CAMERAS order: a narrower front camera and two wide side cameras."""
    cams = []
    for name in CAMERAS:
        fov, x, y, z, yaw, pitch = _RIG[name]
        f = (width / 2.0) / np.tan(np.radians(fov) / 2.0)
        cams.append(CameraModel(name, width, height, float(f), float(f), width / 2.0, height / 2.0,
                                x, y, z, float(np.radians(yaw)), float(np.radians(pitch))))
    return cams
