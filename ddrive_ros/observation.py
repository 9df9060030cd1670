"""What the planner sees at one instant: cameras over two frames, ego state, navigation command."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ddrive_ros.timeline import PAST_TIMES

CAMERAS: tuple[str, ...] = ("left_front", "front", "right_front")
NAV_COMMANDS: tuple[str, ...] = (
    "FOLLOW_LANE",
    "TURN_LEFT",
    "TURN_RIGHT",
    "CHANGE_LANE_LEFT",
    "CHANGE_LANE_RIGHT",
    "STOP",
)
PAST_STEPS = len(PAST_TIMES)  # past ego poses at timeline.PAST_TIMES in the ego frame at t0


@dataclass
class Observation:
    """Inputs for one plan. Frames: ego frame at `stamp` (REP 103: x forward, y left)."""

    images: np.ndarray  # uint8 (2 frames [t0-0.5 s, t0], 3 cameras in CAMERAS order, H, W, 3) RGB
    speed: float  # m/s, longitudinal
    accel: float  # m/s^2, longitudinal
    yaw_rate: float  # rad/s
    past_xy: np.ndarray  # float (PAST_STEPS, 2) past positions in the ego frame at t0, oldest first
    nav_command: str = "FOLLOW_LANE"
    stamp: float = 0.0  # seconds (ROS time of the anchor camera)
    meta: dict = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ValueError with a clear message when the observation cannot be planned on."""
        if self.images.ndim != 5 or self.images.shape[:2] != (2, len(CAMERAS)) or self.images.shape[-1] != 3:
            raise ValueError(f"images must be (2, {len(CAMERAS)}, H, W, 3), got {self.images.shape}")
        if self.images.dtype != np.uint8:
            raise ValueError(f"images must be uint8, got {self.images.dtype}")
        ego = np.array([self.speed, self.accel, self.yaw_rate], dtype=float)
        if not np.all(np.isfinite(ego)):
            raise ValueError(f"ego state has non-finite values: speed={self.speed} accel={self.accel} yaw_rate={self.yaw_rate}")
        past = np.asarray(self.past_xy, dtype=float)
        if past.shape != (PAST_STEPS, 2) or not np.all(np.isfinite(past)):
            raise ValueError(f"past_xy must be finite ({PAST_STEPS}, 2), got {past.shape}")
        if self.nav_command not in NAV_COMMANDS:
            raise ValueError(f"unknown nav_command {self.nav_command!r}; expected one of {NAV_COMMANDS}")
