"""The one recipe that turns recorded inputs into an `Observation`, shared by the synthetic world's
sample maker, the bag extractor and the node's synchroniser, so training and serving see the same
input for the same stream.

    track = EgoTrack.from_rows(odometry_rows)              # (t, x, y, yaw, v, yaw_rate) in a fixed frame
    frames = match_frames(stamps_by_camera, t0, tolerance_s)   # which camera frames make the two-frame input
    obs = assemble(images, track, t0, nav_command)

Timing (all from `ddrive_ros.timeline`): frames at t0 - FRAME_HISTORY_S and t0, the front camera
anchoring each and the side cameras matched to it within a tolerance; speed and yaw rate at t0;
acceleration as the backward speed difference over ACCEL_WINDOW_S; past positions at t0 + PAST_TIMES
in the ego frame at t0. Odometry is interpolated linearly (yaw unwrapped); outside the track the end
sample is moved on at constant speed and heading (a short extrapolation, e.g. a camera frame a few
milliseconds newer than the last odometry).
"""
from __future__ import annotations

import math
from typing import Sequence

import cv2
import numpy as np

from ddrive_ros.observation import CAMERAS, Observation
from ddrive_ros.timeline import ACCEL_WINDOW_S, FRAME_HISTORY_S, PAST_TIMES
from ddrive_ros.trajectory import world_to_ego

ANCHOR = "front"


class RecipeError(RuntimeError):
    """No observation can be built from these inputs; `reason` is a short key for counters."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class EgoTrack:
    """Ego odometry in one fixed frame: time (s), x, y, yaw (unwrapped here), speed, yaw rate."""

    def __init__(self, t: np.ndarray, x: np.ndarray, y: np.ndarray, yaw: np.ndarray, v: np.ndarray,
                 yaw_rate: np.ndarray):
        self.t = np.asarray(t, dtype=float)
        if self.t.ndim != 1 or len(self.t) == 0:
            raise RecipeError("no_odometry", "an ego track needs at least one sample")
        if np.any(np.diff(self.t) <= 0):
            raise ValueError("ego track times must be strictly increasing")
        self.values = np.stack([np.asarray(a, dtype=float) for a in (x, y, np.unwrap(yaw), v, yaw_rate)], axis=1)

    @classmethod
    def from_rows(cls, rows: np.ndarray | Sequence[Sequence[float]]) -> "EgoTrack":
        """From (N, 6) rows t, x, y, yaw, v, yaw_rate; sorted by time, repeated stamps keep the first."""
        arr = np.asarray(rows, dtype=float).reshape(-1, 6)
        arr = arr[np.argsort(arr[:, 0], kind="stable")]
        keep = np.concatenate([[True], np.diff(arr[:, 0]) > 0]) if len(arr) else np.zeros(0, bool)
        arr = arr[keep]
        return cls(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], arr[:, 5])

    @property
    def start(self) -> float:
        return float(self.t[0])

    @property
    def end(self) -> float:
        return float(self.t[-1])

    def states(self, times: np.ndarray | Sequence[float]) -> np.ndarray:
        """(N, 5) x, y, yaw, v, yaw_rate at `times`."""
        q = np.atleast_1d(np.asarray(times, dtype=float))
        out = np.stack([np.interp(q, self.t, self.values[:, i]) for i in range(5)], axis=1)
        for mask, i in ((q < self.t[0], 0), (q > self.t[-1], -1)):
            if np.any(mask):
                x, y, yaw, v, w = self.values[i]
                dt = q[mask] - self.t[i]
                out[mask] = np.stack([x + v * dt * math.cos(yaw), y + v * dt * math.sin(yaw),
                                      np.full_like(dt, yaw), np.full_like(dt, v), np.full_like(dt, w)], axis=1)
        return out

    def in_ego_frame(self, t0: float, times: np.ndarray) -> np.ndarray:
        """Positions at `times` (absolute) in the ego frame at t0 -> (N, 2)."""
        s0 = self.states([t0])[0]
        return world_to_ego(self.states(times)[:, :2], s0[:2], float(s0[2]))


def ego_inputs(track: EgoTrack, t0: float) -> tuple[float, float, float, np.ndarray]:
    """(speed, accel, yaw_rate, past_xy) at t0: what the observation carries of the ego."""
    x0, y0, yaw0, v0, w0 = track.states([t0])[0]
    t_lo = max(t0 - ACCEL_WINDOW_S, track.start)
    accel = 0.0 if t0 - t_lo < 1e-3 else float((v0 - track.states([t_lo])[0, 3]) / (t0 - t_lo))
    past = world_to_ego(track.states(t0 + PAST_TIMES)[:, :2], (x0, y0), float(yaw0))
    return float(v0), accel, float(w0), past


def nearest(stamps: np.ndarray, t: float, tolerance_s: float) -> float | None:
    """The stamp closest to t within the tolerance (stamps sorted ascending), else None."""
    if not len(stamps):
        return None
    i = int(np.searchsorted(stamps, t))
    best = None
    for j in (i - 1, i):
        if 0 <= j < len(stamps) and abs(stamps[j] - t) <= tolerance_s and (best is None or abs(stamps[j] - t) < abs(best - t)):
            best = float(stamps[j])
    return best


def match_frames(stamps: dict[str, np.ndarray], t0: float, tolerance_s: float,
                 history_s: float = FRAME_HISTORY_S) -> list[list[float]]:
    """Stamps of the two-frame input anchored at front frame t0: [[previous per camera], [current
    per camera]] in CAMERAS order. The previous front frame is the one closest to t0 - history_s;
    each side camera is matched to its front frame. Raises RecipeError(no_history | no_match): no_history
    when the front frames, or a side camera's, do not reach back to the history frame yet (a camera heard
    later than the others at start-up), no_match when a camera's frames span the time but none is close."""
    front = stamps[ANCHOR]
    t_prev = nearest(front, t0 - history_s, tolerance_s)
    if t_prev is None:
        raise RecipeError("no_history", f"no {ANCHOR} frame within {tolerance_s:.3f} s of {t0 - history_s:.3f}")
    out = []
    for t_front, what in ((t_prev, "history frame"), (t0, "current frame")):
        row = []
        for cam in CAMERAS:
            t_c = t_front if cam == ANCHOR else nearest(stamps[cam], t_front, tolerance_s)
            if t_c is None and what == "history frame" and (not len(stamps[cam]) or stamps[cam][0] > t_front + tolerance_s):
                raise RecipeError("no_history", f"camera {cam}'s frames start after the history frame's time {t_front:.3f}")
            if t_c is None:
                raise RecipeError("no_match", f"{what}: camera {cam} has no frame within {tolerance_s:.3f} s of {t_front:.3f}")
            row.append(t_c)
        out.append(row)
    return out


def assemble(images: Sequence[Sequence[np.ndarray]], track: EgoTrack, t0: float, nav_command: str,
             stamp: float | None = None, meta: dict | None = None) -> Observation:
    """The observation from the matched frames ([previous, current] x CAMERAS, RGB uint8; side
    frames of another size are resized to the current front frame's) and the ego track."""
    frames = [f for row in images for f in row]
    h, w = frames[len(CAMERAS) + CAMERAS.index(ANCHOR)].shape[:2]
    frames = [f if f.shape[:2] == (h, w) else cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames]
    speed, accel, yaw_rate, past = ego_inputs(track, t0)
    return Observation(images=np.stack(frames).reshape(2, len(CAMERAS), h, w, 3), speed=speed, accel=accel,
                       yaw_rate=yaw_rate, past_xy=past, nav_command=nav_command,
                       stamp=float(t0 if stamp is None else stamp), meta=dict(meta or {}))


def to_model_size(rgb: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """A camera frame at the model's input size (h, w), by the same INTER_AREA resize the planner
    applies; the node does it once on arrival so its buffers do not grow with camera resolution
    (the planner's own resize is then a no-op, so the model sees the same pixels either way)."""
    if size is None or rgb.shape[:2] == tuple(size):
        return rgb
    h, w = size
    return cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
