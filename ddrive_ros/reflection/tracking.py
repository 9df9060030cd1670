"""Velocities for road-user boxes that come without them (numpy only).

The node's ~/input/obstacles is a MarkerArray: boxes in the ego frame, no velocities. Checked as they
are, a car driving away ahead is a wall, and the safety check brakes for it, lets go a tick later when
the box has moved on, and brakes again (in the closed loop: comfort fails from jerk, and lost progress;
docs/reflection.md, "Tracked boxes"). `BoxTracker` follows the boxes from one set to the next:

  * each set is placed in a fixed frame (odom) with the ego pose at its stamp, so the ego's own motion
    does not read as the road users' motion;
  * each box is matched to the nearest track's predicted position (constant velocity since its last
    sighting), greedily in order of distance, within `gate_m`; a box matching no track starts one at
    zero velocity (unknown: checked as standing, as without tracking);
  * a matched track's velocity is the displacement over the time between sightings, blended with its
    previous estimate by `alpha` (1: the newest displacement only);
  * so is its yaw rate, from the heading change: a car bending with its lane is predicted along its bend
    (`safety.predict`), not along its tangent into the ego's lane. Kept at 0 below `min_turn_speed` (a
    standing box has no heading to follow) and where the heading jumps more than `max_heading_step` between
    sightings (a box whose heading flipped end for end); clipped to +-`max_yaw_rate`;
  * a track not seen for `max_gap_s` is forgotten, and so is everything when time runs backwards.

`obstacles_at(t, pose)` gives the boxes of the newest set, each moved on at its velocity to time t,
in the ego frame of `pose` (the observation's): what the plan made at t is checked against. Only the
newest set's boxes are given: what perception no longer reports is not there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddrive_ros.reflection.safety import Obstacle
from ddrive_ros.trajectory import ego_to_world, world_to_ego, wrap_angle

Box = tuple[float, float, float, float, float]  # x, y, yaw, length, width in the ego frame of its stamp


@dataclass
class _Tracks:
    xy: np.ndarray  # (N, 2) odom-frame centre at `seen`
    v: np.ndarray  # (N, 2) odom-frame velocity, m/s
    yaw: np.ndarray  # (N,) odom-frame heading
    w: np.ndarray  # (N,) yaw rate, rad/s
    size: np.ndarray  # (N, 2) length, width
    seen: np.ndarray  # (N,) stamp of the last sighting
    hits: np.ndarray  # (N,) sightings


def _empty() -> _Tracks:
    return _Tracks(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0), np.zeros(0), np.zeros((0, 2)), np.zeros(0),
                   np.zeros(0, int))


class BoxTracker:
    def __init__(self, gate_m: float = 3.0, max_gap_s: float = 0.5, alpha: float = 0.5, max_yaw_rate: float = 1.0,
                 min_turn_speed: float = 1.0, max_heading_step: float = 0.5) -> None:
        if gate_m <= 0 or max_gap_s <= 0 or not 0 < alpha <= 1:
            raise ValueError(f"BoxTracker needs gate_m > 0, max_gap_s > 0, 0 < alpha <= 1; got {gate_m}, {max_gap_s}, "
                             f"{alpha}")
        if max_yaw_rate < 0 or min_turn_speed < 0 or max_heading_step <= 0:
            raise ValueError(f"BoxTracker needs max_yaw_rate >= 0, min_turn_speed >= 0, max_heading_step > 0; got "
                             f"{max_yaw_rate}, {min_turn_speed}, {max_heading_step}")
        self.gate_m, self.max_gap_s, self.alpha = float(gate_m), float(max_gap_s), float(alpha)
        self.max_yaw_rate, self.min_turn_speed = float(max_yaw_rate), float(min_turn_speed)
        self.max_heading_step = float(max_heading_step)
        self.tracks = _empty()
        self.stamp: float | None = None  # the newest set's stamp
        self.current = np.zeros(0, int)  # indices of the tracks the newest set reported
        self.resets = 0  # time ran backwards (a replayed bag looped, a new simulated episode)

    def reset(self) -> None:
        self.tracks, self.stamp, self.current = _empty(), None, np.zeros(0, int)

    def update(self, stamp: float, pose: tuple[float, float, float], boxes: list[Box] | tuple) -> None:
        """One set of boxes, in the ego frame of `pose` (x, y, yaw in odom: the ego at `stamp`)."""
        stamp = float(stamp)
        if self.stamp is not None and stamp <= self.stamp:
            if stamp == self.stamp:
                return  # the same set again
            self.reset()
            self.resets += 1
        raw = np.asarray(boxes, dtype=float).reshape(-1, 5)
        xy = ego_to_world(raw[:, :2], np.asarray(pose[:2], dtype=float), float(pose[2])).reshape(-1, 2)
        yaw = np.asarray(wrap_angle(raw[:, 2] + float(pose[2])), dtype=float).reshape(-1)
        tr = self.tracks
        alive = stamp - tr.seen <= self.max_gap_s
        tr = _Tracks(tr.xy[alive], tr.v[alive], tr.yaw[alive], tr.w[alive], tr.size[alive], tr.seen[alive],
                     tr.hits[alive])
        dt = stamp - tr.seen  # (N,)
        match = np.full(len(raw), -1)
        if len(tr.xy) and len(raw):
            pred = tr.xy + tr.v * dt[:, None]
            d = np.hypot(*(xy[:, None, :] - pred[None, :, :]).transpose(2, 0, 1))  # (M, N)
            taken = np.zeros(len(tr.xy), bool)
            for flat in np.argsort(d, axis=None):
                i, j = divmod(int(flat), len(tr.xy))
                if d[i, j] > self.gate_m:
                    break
                if match[i] < 0 and not taken[j]:
                    match[i], taken[j] = j, True
        new_v = np.zeros((len(raw), 2))
        new_w = np.zeros(len(raw))
        hits = np.ones(len(raw), int)
        for i, j in enumerate(match):
            if j < 0:
                continue
            gap = max(float(dt[j]), 1e-6)
            measured = (xy[i] - tr.xy[j]) / gap
            turn = float(wrap_angle(yaw[i] - tr.yaw[j]))
            turn_rate = turn / gap if abs(turn) <= self.max_heading_step else 0.0
            first = tr.hits[j] == 1
            new_v[i] = measured if first else self.alpha * measured + (1 - self.alpha) * tr.v[j]
            new_w[i] = turn_rate if first else self.alpha * turn_rate + (1 - self.alpha) * tr.w[j]
            hits[i] = tr.hits[j] + 1
        new_w = np.where(np.hypot(new_v[:, 0], new_v[:, 1]) >= self.min_turn_speed,
                         np.clip(new_w, -self.max_yaw_rate, self.max_yaw_rate), 0.0)
        keep = np.setdiff1d(np.arange(len(tr.xy)), match[match >= 0])  # tracks missed this time, kept a while
        self.tracks = _Tracks(np.concatenate([xy, tr.xy[keep]]), np.concatenate([new_v, tr.v[keep]]),
                              np.concatenate([yaw, tr.yaw[keep]]), np.concatenate([new_w, tr.w[keep]]),
                              np.concatenate([raw[:, 3:5], tr.size[keep]]),
                              np.concatenate([np.full(len(raw), stamp), tr.seen[keep]]),
                              np.concatenate([hits, tr.hits[keep]]))
        self.current = np.arange(len(raw))
        self.stamp = stamp

    def obstacles_at(self, t: float, pose: tuple[float, float, float]) -> tuple[Obstacle, ...]:
        """The newest set's boxes moved on to time t at their velocities, in the ego frame of `pose` (the ego at t),
        with their velocities rotated into that frame and their yaw rates."""
        if self.stamp is None or not len(self.current):
            return ()
        tr, idx = self.tracks, self.current
        xy = tr.xy[idx] + tr.v[idx] * (float(t) - self.stamp)
        p0, yaw0 = np.asarray(pose[:2], dtype=float), float(pose[2])
        local = world_to_ego(xy, p0, yaw0).reshape(-1, 2)
        c, s = np.cos(yaw0), np.sin(yaw0)
        vx = c * tr.v[idx, 0] + s * tr.v[idx, 1]
        vy = -s * tr.v[idx, 0] + c * tr.v[idx, 1]
        yaw = np.asarray(wrap_angle(tr.yaw[idx] - yaw0), dtype=float).reshape(-1)
        return tuple(Obstacle(float(p[0]), float(p[1]), float(h), float(sz[0]), float(sz[1]), float(a), float(b), float(w))
                     for p, h, sz, a, b, w in zip(local, yaw, tr.size[idx], vx, vy, tr.w[idx]))
