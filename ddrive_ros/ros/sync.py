"""Time synchronisation and bounded input history for the planner node (plain Python, no rclpy).

Everything here is driven by explicit timestamps (seconds, ROS time of the message headers), so it
unit-tests without ROS. The node feeds messages in, a timer asks `Synchronizer.build(now)` for an
`Observation`, and the answer is either an observation or a `SyncError` naming why there is none.

- Cameras: one bounded ring buffer per camera (deque(maxlen)). The front camera is the anchor:
  the newest front frame fixes t0; the side cameras must have a frame within `tolerance_s` of it.
  The history frame is the front frame closest to t0 - history_s (again within tolerance), and the
  side cameras are matched to that frame the same way.
- Odometry: a bounded history (by age) of (t, x, y, yaw, v, yaw_rate) in the odom frame. The
  ego state at t0 is interpolated; accel comes from speed differences; past_xy are past positions
  interpolated at t0 - (2.0, 1.5, 1.0, 0.5) s and expressed in the ego frame at t0.
"""
from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field

import cv2
import numpy as np

from ddrive_ros.observation import CAMERAS, NAV_COMMANDS, PAST_STEPS, Observation
from ddrive_ros.trajectory import wrap_angle, world_to_ego

PAST_TIMES = -0.5 * np.arange(PAST_STEPS, 0, -1)  # -2.0, -1.5, -1.0, -0.5 s
ANCHOR = "front"


class SyncError(RuntimeError):
    """No observation can be built now; `reason` is a short machine-readable key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class DropCounter:
    """Counts of dropped messages by reason (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self._counts[reason] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


@dataclass(frozen=True)
class StampedImage:
    stamp: float
    image: np.ndarray  # (H, W, 3) uint8 RGB


class FrameBuffer:
    """Bounded, stamp-ordered ring buffer of camera frames."""

    def __init__(self, maxlen: int):
        if maxlen < 1:
            raise ValueError(f"buffer length must be >= 1, got {maxlen}")
        self.frames: deque[StampedImage] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def latest(self) -> StampedImage | None:
        return self.frames[-1] if self.frames else None

    def push(self, stamp: float, image: np.ndarray) -> bool:
        """Append a frame; False (not stored) when it is not newer than the newest frame."""
        if self.frames and stamp <= self.frames[-1].stamp:
            return False
        self.frames.append(StampedImage(float(stamp), image))
        return True

    def closest(self, t: float, tolerance: float) -> StampedImage | None:
        best = None
        for f in self.frames:
            if abs(f.stamp - t) <= tolerance and (best is None or abs(f.stamp - t) < abs(best.stamp - t)):
                best = f
        return best

    def clear(self) -> None:
        self.frames.clear()


@dataclass(frozen=True)
class OdomSample:
    t: float
    x: float
    y: float
    yaw: float
    v: float
    yaw_rate: float


class OdomHistory:
    """Odometry samples in the odom frame, kept for `horizon_s` seconds (and at most `maxlen` samples)."""

    def __init__(self, horizon_s: float = 3.0, maxlen: int = 2000):
        self.horizon_s = float(horizon_s)
        self.samples: deque[OdomSample] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def latest(self) -> OdomSample | None:
        return self.samples[-1] if self.samples else None

    def push(self, s: OdomSample) -> bool:
        if self.samples and s.t <= self.samples[-1].t:
            return False
        self.samples.append(s)
        while self.samples and self.samples[0].t < s.t - self.horizon_s:
            self.samples.popleft()
        return True

    def clear(self) -> None:
        self.samples.clear()

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        arr = np.array([(s.t, s.x, s.y, s.yaw, s.v, s.yaw_rate) for s in self.samples], dtype=float)
        return arr[:, 0], arr[:, 1:]

    def state_at(self, t: float) -> np.ndarray:
        """(x, y, yaw, v, yaw_rate) at time t: interpolated inside the history; outside it the
        nearest end sample moved at constant speed and heading (short extrapolation)."""
        if not self.samples:
            raise SyncError("no_odometry")
        ts, vals = self._arrays()
        if t <= ts[0] or t >= ts[-1]:
            i = 0 if t <= ts[0] else len(ts) - 1
            x, y, yaw, v, w = vals[i]
            dt = t - ts[i]
            return np.array([x + v * dt * math.cos(yaw), y + v * dt * math.sin(yaw), yaw, v, w])
        j = bisect_left(ts.tolist(), t)
        a = (t - ts[j - 1]) / (ts[j] - ts[j - 1])
        lo, hi = vals[j - 1], vals[j]
        out = lo + a * (hi - lo)
        out[2] = float(wrap_angle(lo[2] + a * float(wrap_angle(hi[2] - lo[2]))))
        return out

    def accel_at(self, t: float, window_s: float = 0.2) -> float:
        """Longitudinal acceleration from speed differences over `window_s` ending at t."""
        if len(self.samples) < 2:
            return 0.0
        ts, _ = self._arrays()
        t_lo = max(t - window_s, ts[0])
        if t - t_lo < 1e-3:
            return 0.0
        return float((self.state_at(t)[3] - self.state_at(t_lo)[3]) / (t - t_lo))

    def past_xy(self, t0: float) -> np.ndarray:
        """(PAST_STEPS, 2) positions at t0 + PAST_TIMES in the ego frame at t0."""
        x0, y0, yaw0 = self.state_at(t0)[:3]
        pts = np.array([self.state_at(t0 + dt)[:2] for dt in PAST_TIMES])
        return world_to_ego(pts, (x0, y0), yaw0)


@dataclass
class SyncConfig:
    tolerance_s: float = 0.05
    history_s: float = 0.5
    max_input_age_s: float = 0.5
    camera_buffer: int = 30
    odom_horizon_s: float = 3.0
    time_jump_s: float = 1.0  # a stamp this much older than the newest one means the clock went back


@dataclass
class InputAges:
    ages: dict[str, float | None] = field(default_factory=dict)  # seconds, None = never received

    @property
    def stale(self) -> list[str]:
        return [k for k, v in self.ages.items() if v is None or v != v]

    def stale_by(self, max_age: float) -> list[str]:
        return [k for k, v in self.ages.items() if v is None or v > max_age]


class Synchronizer:
    """Holds the latest inputs and builds synchronised two-frame observations."""

    def __init__(self, config: SyncConfig | None = None):
        self.config = cfg = config or SyncConfig()
        self.cameras = {name: FrameBuffer(cfg.camera_buffer) for name in CAMERAS}
        self.odom = OdomHistory(cfg.odom_horizon_s)
        self.nav_command = "FOLLOW_LANE"
        self.nav_stamp: float | None = None
        self.drops = DropCounter()
        self.time_jumps = 0

    # ---------------------------------------------------------------- inputs
    def _check_jump(self, stamp: float, newest: float | None) -> None:
        if newest is not None and stamp < newest - self.config.time_jump_s:
            self.reset()
            self.time_jumps += 1

    def reset(self) -> None:
        for b in self.cameras.values():
            b.clear()
        self.odom.clear()

    def add_image(self, camera: str, stamp: float, image: np.ndarray) -> bool:
        if camera not in self.cameras:
            raise KeyError(f"unknown camera {camera!r}; expected one of {CAMERAS}")
        buf = self.cameras[camera]
        self._check_jump(stamp, buf.latest.stamp if buf.latest else None)
        if not buf.push(stamp, image):
            self.drops.add("out_of_order")
            return False
        return True

    def add_odometry(self, sample: OdomSample) -> bool:
        if not all(math.isfinite(v) for v in (sample.t, sample.x, sample.y, sample.yaw, sample.v, sample.yaw_rate)):
            self.drops.add("nan_odometry")
            return False
        self._check_jump(sample.t, self.odom.latest.t if self.odom.latest else None)
        if not self.odom.push(sample):
            self.drops.add("out_of_order")
            return False
        return True

    def set_nav_command(self, command: str, stamp: float) -> bool:
        command = command.strip().upper()
        if command not in NAV_COMMANDS:
            self.drops.add("unknown_nav_command")
            return False
        self.nav_command, self.nav_stamp = command, float(stamp)
        return True

    # ---------------------------------------------------------------- state
    def input_ages(self, now: float) -> InputAges:
        ages: dict[str, float | None] = {}
        for name, buf in self.cameras.items():
            ages[f"camera/{name}"] = None if buf.latest is None else now - buf.latest.stamp
        ages["odometry"] = None if self.odom.latest is None else now - self.odom.latest.t
        return InputAges(ages)

    def stale_inputs(self, now: float) -> list[str]:
        return self.input_ages(now).stale_by(self.config.max_input_age_s)

    @property
    def anchor_stamp(self) -> float | None:
        f = self.cameras[ANCHOR].latest
        return None if f is None else f.stamp

    def _match(self, t: float, what: str) -> list[np.ndarray]:
        tol = self.config.tolerance_s
        imgs = []
        for name in CAMERAS:
            f = self.cameras[name].closest(t, tol)
            if f is None:
                raise SyncError("no_match", f"{what}: camera {name} has no frame within {tol:.3f} s of {t:.3f}")
            imgs.append(f.image)
        return imgs

    def build(self, now: float) -> Observation:
        """The observation anchored at the newest front frame, or SyncError."""
        stale = self.stale_inputs(now)
        if stale:
            raise SyncError("stale_input", ", ".join(stale))
        anchor = self.cameras[ANCHOR].latest
        t0 = anchor.stamp
        current = self._match(t0, "current frame")
        hist = self.cameras[ANCHOR].closest(t0 - self.config.history_s, self.config.tolerance_s)
        if hist is None:
            raise SyncError("no_history", f"no front frame {self.config.history_s:.2f} s before {t0:.3f}")
        previous = self._match(hist.stamp, "history frame")
        frames = previous + current
        h, w = frames[3 + CAMERAS.index(ANCHOR)].shape[:2]
        frames = [f if f.shape[:2] == (h, w) else cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames]
        images = np.stack(frames).reshape(2, len(CAMERAS), h, w, 3)
        _, _, _, v, yaw_rate = self.odom.state_at(t0)
        return Observation(
            images=images,
            speed=float(v),
            accel=self.odom.accel_at(t0),
            yaw_rate=float(yaw_rate),
            past_xy=self.odom.past_xy(t0),
            nav_command=self.nav_command,
            stamp=float(t0),
            meta={"history_stamp": hist.stamp},
        )


def comfortable_stop(trajectory: np.ndarray, decel: float = 2.0, v0: float | None = None) -> np.ndarray:
    """A stop along the path of `trajectory` ((N, 5) t, x, y, yaw, v in the ego frame at its stamp).

    Starts at speed v0 (default: the first row's speed) and decelerates at `decel` m/s^2 along the
    same polyline (from the origin), then stands still. Same times, same frame.
    """
    traj = np.asarray(trajectory, dtype=float)
    t = traj[:, 0]
    pts = np.vstack([[0.0, 0.0], traj[:, 1:3]])
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    s_path = np.concatenate([[0.0], np.cumsum(seg)])
    v0 = float(max(traj[0, 4] if v0 is None else v0, 0.0))
    decel = max(float(decel), 1e-3)
    t_stop = v0 / decel
    tc = np.minimum(t, t_stop)
    s = v0 * tc - 0.5 * decel * tc ** 2
    s = np.minimum(s, s_path[-1])
    x = np.interp(s, s_path, pts[:, 0])
    y = np.interp(s, s_path, pts[:, 1])
    yaw_nodes = np.concatenate([[traj[0, 3]], traj[:, 3]])
    yaw = np.interp(s, s_path, np.unwrap(yaw_nodes))
    v = np.maximum(v0 - decel * t, 0.0)
    return np.stack([t, x, y, yaw, v], axis=1)
