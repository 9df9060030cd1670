"""The tracking controller that turns a plan into driving: pure pursuit + speed/position tracking on
a kinematic bicycle with actuator limits. The closed-loop simulator and the open-loop PDM score
(NAVSIM's protocol, which uses an LQR tracker; this is our documented stand-in) both drive with it.

Lateral: pure pursuit from the rear axle towards the point LOOKAHEAD(v) metres further along the
plan's path (past the path's end the path is extended along its last heading).
Longitudinal: a = a_ref(tau) + K_S (s_ref(tau) - s) + K_V (v_ref(tau) - v), where s is the ego's
arc length along the plan (its projection) and s_ref, v_ref, a_ref are the plan's arc length, speed
and acceleration at the plan's own clock tau = t - plan stamp. Tracking the position as well as
the speed keeps a plan's stop point a stop point instead of drifting by the speed error.
Plant: kinematic bicycle (wheelbase EGO_WHEELBASE) with acceleration, steering-angle and
steering-rate limits; speed never goes negative (no reversing).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddrive_ros.sim.scenario import EGO_WHEELBASE
from ddrive_ros.sim.scorer import savgol_derivative

K_S = 0.6  # 1/s^2: position gain (along the path)
K_V = 1.6  # 1/s: speed gain
ACCEL_LIMITS = (-7.0, 3.0)  # m/s^2: hardest braking (the world's IDM a_min) and strongest acceleration
MAX_STEER = 0.6  # rad: as the expert
MAX_STEER_RATE = 0.8  # rad/s at the road wheel
REFERENCE_WINDOW = 5  # plan samples (1.25 s at 0.25 s) of the quadratic fit giving the speed/accel reference
STOP_SPEED = 0.2  # m/s: a plan slower than this at the current instant and ahead means "stand still"


def lookahead(v: float) -> float:
    """Pure-pursuit look-ahead distance (m): the expert's law, 4..12 m."""
    return float(np.clip(3.0 + 0.45 * v, 4.0, 12.0))


@dataclass
class VehicleState:
    """Rear-axle pose in the world frame, speed, and the current road-wheel angle."""

    x: float
    y: float
    yaw: float
    v: float
    steer: float = 0.0

    def step(self, accel: float, steer_cmd: float, dt: float) -> tuple[float, float]:
        """Advance by dt with the limits applied; returns (applied accel, yaw rate)."""
        a = float(np.clip(accel, *ACCEL_LIMITS))
        d_max = MAX_STEER_RATE * dt
        self.steer = float(np.clip(self.steer + np.clip(steer_cmd - self.steer, -d_max, d_max), -MAX_STEER, MAX_STEER))
        v_new = max(self.v + a * dt, 0.0)
        a = (v_new - self.v) / dt
        yaw_rate = self.v * np.tan(self.steer) / EGO_WHEELBASE
        v_mid = 0.5 * (self.v + v_new)
        yaw_mid = self.yaw + 0.5 * yaw_rate * dt
        self.x += v_mid * np.cos(yaw_mid) * dt
        self.y += v_mid * np.sin(yaw_mid) * dt
        self.yaw += yaw_rate * dt
        self.v = v_new
        return a, float(yaw_rate)


@dataclass
class WorldPlan:
    """A plan in the world frame: times from its stamp (starting at 0 with the pose it was made
    from), positions, arc length, speed and acceleration along it."""

    stamp: float
    t: np.ndarray  # (N,) s from stamp, t[0] = 0
    xy: np.ndarray  # (N, 2)
    s: np.ndarray  # (N,) arc length along xy
    v: np.ndarray  # (N,)
    a: np.ndarray  # (N,)
    end_heading: float

    @classmethod
    def from_ego_trajectory(cls, trajectory: np.ndarray, stamp: float, pose: tuple[float, float, float],
                            v0: float) -> "WorldPlan":
        """From the planner's (N, 5) t, x, y, yaw, v in the ego frame at `pose` = (x, y, yaw) at stamp."""
        traj = np.asarray(trajectory, dtype=float)
        if traj.ndim != 2 or traj.shape[1] < 3 or not np.all(np.isfinite(traj[:, :3])):
            raise ValueError(f"plan trajectory must be finite (N, >=3) t, x, y, ...; got {traj.shape}")
        x0, y0, yaw0 = pose
        c, s = np.cos(yaw0), np.sin(yaw0)
        local = np.vstack([[0.0, 0.0], traj[:, 1:3]])
        xy = np.stack([x0 + c * local[:, 0] - s * local[:, 1], y0 + s * local[:, 0] + c * local[:, 1]], axis=1)
        t = np.concatenate([[0.0], traj[:, 0]])
        seg = np.linalg.norm(np.diff(xy, axis=0), axis=1)
        arc = np.concatenate([[0.0], np.cumsum(seg)])
        # speed and acceleration along the path from the arc length by a local quadratic fit over
        # REFERENCE_WINDOW samples (Savitzky-Golay): a plan's points are quantised (0.1 m), and raw
        # differences of them would feed the tracker steps of +-1 m/s^2 every sample, i.e. jerk
        dt = np.diff(t)
        if len(t) >= 3 and np.allclose(dt, dt[0]):
            v = savgol_derivative(arc, float(dt[0]), 1, window=REFERENCE_WINDOW)
            a = savgol_derivative(arc, float(dt[0]), 2, window=REFERENCE_WINDOW)
        else:  # an uneven grid: plain differences
            v = np.gradient(arc, t)
            a = np.gradient(v, t)
        v = np.maximum(v, 0.0)
        moving = seg > 0.05
        if np.any(moving):
            last = int(np.flatnonzero(moving)[-1])
            end_heading = float(np.arctan2(*(xy[last + 1] - xy[last])[::-1]))
        else:
            end_heading = float(yaw0)
        return cls(float(stamp), t, xy, arc, v, a, end_heading)

    def point_at(self, s: float) -> np.ndarray:
        if s <= self.s[-1]:
            return np.array([np.interp(s, self.s, self.xy[:, 0]), np.interp(s, self.s, self.xy[:, 1])])
        over = s - self.s[-1]
        return self.xy[-1] + over * np.array([np.cos(self.end_heading), np.sin(self.end_heading)])

    def project(self, x: float, y: float) -> float:
        """Arc length of the nearest point of the path to (x, y)."""
        a = self.xy[:-1]
        ab = np.diff(self.xy, axis=0)
        l2 = np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12)
        u = np.clip(((x - a[:, 0]) * ab[:, 0] + (y - a[:, 1]) * ab[:, 1]) / l2, 0.0, 1.0)
        px, py = a[:, 0] + u * ab[:, 0], a[:, 1] + u * ab[:, 1]
        k = int(np.argmin((px - x) ** 2 + (py - y) ** 2))
        s = float(self.s[k] + u[k] * np.sqrt(l2[k]))
        if k == len(ab) - 1 and u[k] >= 1.0:  # past the end: keep counting along the extension
            h = np.array([np.cos(self.end_heading), np.sin(self.end_heading)])
            s += max(float(np.dot([x - self.xy[-1, 0], y - self.xy[-1, 1]], h)), 0.0)
        return s

    def reference(self, tau: float) -> tuple[float, float, float]:
        """(s, v, a) the plan asks for at tau seconds after its stamp (held after its end)."""
        if tau >= self.t[-1]:
            return float(self.s[-1]), float(self.v[-1]), 0.0
        return (float(np.interp(tau, self.t, self.s)), float(np.interp(tau, self.t, self.v)),
                float(np.interp(tau, self.t, self.a)))


class TrackingController:
    """Pure pursuit + arc-length/speed tracking of the newest WorldPlan."""

    def command(self, state: VehicleState, plan: WorldPlan, t: float) -> tuple[float, float]:
        """(acceleration, road-wheel angle) commands at world time t."""
        tau = t - plan.stamp
        s_ego = plan.project(state.x, state.y)
        s_ref, v_ref, a_ref = plan.reference(tau)
        if v_ref < STOP_SPEED and s_ref - s_ego < 0.5:
            # the plan stands here: brake to a stop (proportionally, so a creeping ego stops smoothly)
            accel = -max(K_V * state.v, 0.0) if state.v > 0.0 else 0.0
        else:
            accel = a_ref + K_S * (s_ref - s_ego) + K_V * (v_ref - state.v)
        target = plan.point_at(s_ego + lookahead(state.v))
        dx, dy = target[0] - state.x, target[1] - state.y
        c, s = np.cos(state.yaw), np.sin(state.yaw)
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        dist = max(float(np.hypot(lx, ly)), 1e-3)
        alpha = float(np.arctan2(ly, lx))
        steer = float(np.arctan2(2.0 * EGO_WHEELBASE * np.sin(alpha), dist))
        return float(accel), float(np.clip(steer, -MAX_STEER, MAX_STEER))
