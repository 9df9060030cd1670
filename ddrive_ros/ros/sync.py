"""Time synchronisation and bounded input history for the planner node (plain Python, no rclpy).

Everything here is driven by explicit timestamps (seconds, ROS time of the message headers), so it
unit-tests without ROS. The node feeds messages in, a timer asks `Synchronizer.build(now)` for an
`Observation`, and the answer is either an observation or a `SyncError` naming why there is none.

- Cameras: one bounded ring buffer per camera (deque(maxlen)). The front camera is the anchor:
  the newest front frame with a complete set fixes t0 (see `Synchronizer.build`).
- Odometry: a bounded history (by age) of (t, x, y, yaw, v, yaw_rate) in the odom frame.
- Which frames, and how the ego state becomes observation fields, is the shared observation
  recipe (`ddrive_ros.observation_recipe`), the same one the bag extractor and the world use.
"""
from __future__ import annotations

import math
import threading
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from ddrive_ros.observation import CAMERAS, NAV_COMMANDS, Observation
from ddrive_ros.observation_recipe import ANCHOR, EgoTrack, RecipeError, assemble, ego_inputs, match_frames



class SyncError(RecipeError):
    """No observation can be built now; `reason` is a short machine-readable key (stale_input,
    no_odometry, no_history, no_match)."""


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

    def at(self, stamp: float) -> np.ndarray:
        for f in reversed(self.frames):
            if f.stamp == stamp:
                return f.image
        raise KeyError(f"no frame stamped {stamp}")

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

    def track(self) -> EgoTrack:
        if not self.samples:
            raise SyncError("no_odometry")
        return EgoTrack.from_rows([(s.t, s.x, s.y, s.yaw, s.v, s.yaw_rate) for s in self.samples])

    def state_at(self, t: float) -> np.ndarray:
        """(x, y, yaw, v, yaw_rate) at time t (the observation recipe's interpolation)."""
        return self.track().states([t])[0]

    def accel_at(self, t: float) -> float:
        return ego_inputs(self.track(), t)[1]

    def past_xy(self, t0: float) -> np.ndarray:
        """(PAST_STEPS, 2) positions at t0 + PAST_TIMES in the ego frame at t0."""
        return ego_inputs(self.track(), t0)[3]


@dataclass
class SyncConfig:
    tolerance_s: float = 0.05
    history_s: float = 0.5
    max_input_age_s: float = 0.5
    camera_buffer: int = 30
    odom_horizon_s: float = 3.0
    time_jump_s: float = 1.0  # a stamp this much older than the newest one means the clock went back
    # an anchor whose odometry has not reached its stamp waits for it until this long after the stamp (the
    # caller's clock); after that its ego state is extrapolated from the newest sample at constant velocity
    odom_wait_s: float = 0.03


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

    def build(self, now: float) -> Observation:
        """The observation anchored at the newest front frame that has a complete set (both frames,
        every camera within tolerance), searching back through the front buffer the way
        message_filters' ApproximateTime takes the newest complete set; else SyncError naming why
        the newest anchor failed that is not still waiting for a side frame (at start-up that is
        no_history, however the newest front frame's side frames are timed)."""
        stale = self.stale_inputs(now)
        if stale:
            raise SyncError("stale_input", ", ".join(stale))
        stamps = {name: np.array([f.stamp for f in buf.frames]) for name, buf in self.cameras.items()}
        tol = self.config.tolerance_s
        first_error: RecipeError | None = None
        pending: str | None = None
        odom_t = self.odom.latest.t
        too_old = 0
        for t0 in stamps[ANCHOR][::-1]:
            if now - t0 > self.config.max_input_age_s:
                # older anchors are older still: a set that old is not planned from (after a lost side frame the search
                # would otherwise reach back to whatever complete set the buffer still holds, seconds or a whole
                # replayed episode ago)
                too_old = int(np.sum(stamps[ANCHOR] <= t0))
                break
            if odom_t < t0 and now - t0 < self.config.odom_wait_s:
                pending = pending or f"{ANCHOR} frame {t0:.3f} waits for odometry (newest {odom_t:.3f})"
                continue
            # a side camera that has sent nothing stamped at or past t0 + tolerance may still send this anchor's
            # frame (side frames arrive after the front one): the anchor is in flight, not failed
            waiting = [cam for cam in CAMERAS if cam != ANCHOR and len(stamps[cam])
                       and stamps[cam][-1] < t0 + tol and not np.any(np.abs(stamps[cam] - t0) <= tol)]
            if waiting:
                pending = pending or f"{ANCHOR} frame {t0:.3f} waits for {', '.join(waiting)}"
                continue
            try:
                matched = match_frames(stamps, float(t0), self.config.tolerance_s, self.config.history_s)
            except RecipeError as e:
                first_error = first_error or e
                continue
            images = [[self.cameras[cam].at(t) for cam, t in zip(CAMERAS, row)] for row in matched]
            try:
                track = self.odom.track()
                # the odometry pose at t0 goes along, so outputs can be put in the odometry's frame
                x, y, yaw = (float(v) for v in track.states([float(t0)])[0][:3])
                return assemble(images, track, float(t0), self.nav_command,
                                meta={"history_stamp": matched[0][CAMERAS.index(ANCHOR)], "odom_pose": (x, y, yaw)})
            except RecipeError as e:
                raise SyncError(e.reason, e.detail) from e
        if first_error is not None:  # the newest anchor that is not in flight says why
            raise SyncError(first_error.reason, first_error.detail)
        if pending is not None:
            raise SyncError("no_match", pending)
        if too_old:
            raise SyncError("no_match", f"no complete set within max_input_age_s {self.config.max_input_age_s:g} s "
                                        f"({too_old} older {ANCHOR} frames not searched)")
        raise SyncError("no_match", f"no {ANCHOR} frame buffered")


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
