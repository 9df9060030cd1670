"""Other road users: lane-bound vehicles and cyclists (IDM, vectorised) and pedestrians (closed form).

Lane agents follow the agent ahead in their lane (the ego included when it overlaps the lane),
stop at red or yellow lights they can still stop for, make a full stop at stop signs, wait for
pedestrians on crosswalks, and may carry one scripted braking event (the "lead vehicle brakes"
situation the labels talk about).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddrive_ros.sim.idm import IdmParams, can_stop, idm_accel
from ddrive_ros.sim.road import RoadMap
from ddrive_ros.sim.scenario import EGO_LENGTH, EGO_WIDTH, LaneAgentSpec, Scenario, WalkerSpec
from ddrive_ros.sim.traffic_light import RED, YELLOW

CROSSWALK_LEAD_S = 1.5  # a pedestrian about to cross blocks the crosswalk this long before stepping out
STOP_SIGN_DWELL_S = 1.0  # full stop this long at a stop sign before going
STOP_SIGN_ZONE_M = 3.0  # "at the stop line": the front bumper within this distance of it


@dataclass
class EgoView:
    """What the other drivers know of the ego at one step."""

    sd: list[tuple[float, float] | None]  # per road: (s, d) of the ego box centre, None when off that road
    yaw: float
    v: float


def walker_state(walkers: list[WalkerSpec], t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Road coordinates (s, d), road-frame velocity (vs, vd) of all walkers at time t."""
    if not walkers:
        z = np.zeros((0, 2))
        return z, z, z[:, 0], z[:, 0]
    s0 = np.array([w.s for w in walkers])
    d0 = np.array([w.d for w in walkers])
    vs = np.array([w.vs for w in walkers])
    vd = np.array([w.vd for w in walkers])
    t_start = np.array([w.t_start for w in walkers])
    t_stop = np.array([w.t_stop for w in walkers])
    walked = np.clip(t - t_start, 0.0, np.maximum(t_stop - t_start, 0.0))
    moving = (t >= t_start) & (t < t_stop)
    sd = np.stack([s0 + vs * walked, d0 + vd * walked], axis=1)
    vel = np.stack([vs, vd], axis=1) * moving[:, None]
    return sd, vel, t_start, t_stop


def crosswalk_blocked(walkers: list[WalkerSpec], crosswalk: int, t: float, d_path: float | None = None,
                      clearance: float = 2.5) -> bool:
    """Whether a pedestrian is on, or about to step onto, the crosswalk.

    With `d_path` (lateral offset of the vehicle's path) the crosswalk counts as free once every
    pedestrian has passed that path by `clearance` metres, so a vehicle need not wait for the
    pedestrian to reach the far kerb.
    """
    for w in walkers:
        if w.crosswalk != crosswalk or not (w.t_start - CROSSWALK_LEAD_S <= t <= w.t_stop):
            continue
        if d_path is None:
            return True
        d_now = w.d + w.vd * max(t - w.t_start, 0.0)
        if (w.vd > 0 and d_now < d_path + clearance) or (w.vd < 0 and d_now > d_path - clearance):
            return True
    return False


class LaneTraffic:
    """State and one-step update of all lane agents, vectorised over agents."""

    def __init__(self, scenario: Scenario, params: IdmParams | None = None) -> None:
        self.sc = scenario
        self.map: RoadMap = scenario.road_map
        self.p = params or IdmParams()
        specs: list[LaneAgentSpec] = scenario.lane_agents
        self.n = len(specs)
        self.road = np.array([a.road for a in specs], dtype=int)
        self.lane = np.array([a.lane for a in specs], dtype=int)
        self.s = np.array([a.s for a in specs], dtype=float)
        self.v = np.array([a.v for a in specs], dtype=float)
        self.v_des = np.array([a.v_des for a in specs], dtype=float)
        self.half_len = np.array([a.size[0] / 2 for a in specs], dtype=float)
        self.half_wid = np.array([a.size[1] / 2 for a in specs], dtype=float)
        self.dir = np.zeros(self.n, dtype=int)
        self.d = np.zeros(self.n)
        for r, road in enumerate(self.map.roads):
            on = self.road == r
            self.dir[on] = road.lane_dir(self.lane[on])
            self.d[on] = road.lane_d(self.lane[on]) + np.array([a.lat_offset for a in specs])[on]
        self.brake = np.array([a.brake or (np.inf, -np.inf, 0.0) for a in specs], dtype=float).reshape(-1, 3)
        self.stop_dwell = np.zeros(self.n)
        self.stop_cleared = np.zeros(self.n, dtype=bool)
        self.accel = np.zeros(self.n)

    def poses(self) -> tuple[np.ndarray, np.ndarray]:
        """World box centres (n, 2) and headings (n,)."""
        xy = np.zeros((self.n, 2))
        yaw = np.zeros(self.n)
        for r, road in enumerate(self.map.roads):
            on = self.road == r
            if np.any(on):
                xy[on], h = road.ref.pose_at(self.s[on], self.d[on])
                yaw[on] = h + np.where(self.dir[on] < 0, np.pi, 0.0)
        return xy, yaw

    def _stop_line_accel(self, t: float, u: np.ndarray) -> np.ndarray:
        """IDM acceleration towards every active stop line (intersection control, crosswalks)."""
        p = self.p
        acc = np.full(self.n, np.inf)
        front = u + self.half_len
        inter = self.map.intersection
        if inter is not None:
            stop_u = np.array([self.dir[i] * inter.stop_s(self.road[i], self.dir[i]) for i in range(self.n)])
            gap = stop_u - front
            before = gap > -0.3
            if inter.control == "light":
                state = np.array([str(inter.light.state(t, r)) for r in (0, 1)])[self.road]
                active = before & ((state == RED) & can_stop(self.v, gap, 7.0) | (state == YELLOW) & can_stop(
                    self.v, gap, 3.0))
            else:
                active = before & ~self.stop_cleared
            a = idm_accel(self.v, self.v_des, gap, 0.0, p, s0=p.s0_line)
            acc = np.where(active, np.minimum(acc, a), acc)
        for i, cw in enumerate(self.map.crosswalks):
            if not crosswalk_blocked(self.sc.walkers, i, t):
                continue
            stop_u = np.array([self.dir[k] * cw.stop_s(self.dir[k]) for k in range(self.n)])
            gap = stop_u - front
            active = (self.road == cw.road) & (gap > -0.3) & can_stop(self.v, gap, 5.0)
            a = idm_accel(self.v, self.v_des, gap, 0.0, p, s0=p.s0_line)
            acc = np.where(active, np.minimum(acc, a), acc)
        return acc

    def _stop_sign_update(self, u: np.ndarray, dt: float) -> None:
        inter = self.map.intersection
        if inter is None or inter.control != "stop_sign" or self.n == 0:
            return
        stop_u = np.array([self.dir[i] * inter.stop_s(self.road[i], self.dir[i]) for i in range(self.n)])
        gap = stop_u - (u + self.half_len)
        at_line = (gap > -0.3) & (gap < STOP_SIGN_ZONE_M) & (self.v < 0.3)
        self.stop_dwell = np.where(at_line, self.stop_dwell + dt, 0.0)
        self.stop_cleared |= self.stop_dwell >= STOP_SIGN_DWELL_S
        self.stop_cleared |= gap < -0.3  # already past the line

    def step(self, t: float, dt: float, ego: EgoView) -> None:
        if self.n == 0:
            return
        p = self.p
        u = self.dir * self.s
        # leader in the same lane: (n, n) pairwise gaps
        same = (self.road[:, None] == self.road[None, :]) & (self.lane[:, None] == self.lane[None, :])
        du = u[None, :] - u[:, None]
        gap = du - self.half_len[:, None] - self.half_len[None, :]
        ahead = same & (du > 0)
        gap = np.where(ahead, gap, np.inf)
        lead = np.argmin(gap, axis=1)
        lead_gap = gap[np.arange(self.n), lead]
        lead_v = np.where(np.isfinite(lead_gap), self.v[lead], 0.0)
        # the ego, where it overlaps an agent's lane
        for r, sd in enumerate(ego.sd):
            if sd is None:
                continue
            s_e, d_e = sd
            on = (self.road == r) & (np.abs(self.d - d_e) < self.half_wid + EGO_WIDTH / 2 + 0.3)
            ue = self.dir * s_e
            g = np.where(on & (ue > u), ue - u - self.half_len - EGO_LENGTH / 2, np.inf)
            road_heading = self.map.roads[r].ref.heading_at(s_e) + np.where(self.dir < 0, np.pi, 0.0)
            v_e = np.maximum(ego.v * np.cos(ego.yaw - road_heading), 0.0)
            closer = g < lead_gap
            lead_gap = np.where(closer, g, lead_gap)
            lead_v = np.where(closer, v_e, lead_v)
        self._stop_sign_update(u, dt)
        a = idm_accel(self.v, self.v_des, lead_gap, lead_v, p)
        a = np.minimum(a, self._stop_line_accel(t, u))
        braking = (t >= self.brake[:, 0]) & (t < self.brake[:, 1])
        a = np.where(braking, np.minimum(a, -self.brake[:, 2]), a)
        v_new = np.maximum(self.v + a * dt, 0.0)
        self.accel = (v_new - self.v) / dt
        ds = 0.5 * (self.v + v_new) * dt
        for r, road in enumerate(self.map.roads):
            on = self.road == r
            if np.any(on):
                # arc length along an offset lane is (1 - kappa d) times the reference's
                stretch = np.maximum(1.0 - road.ref.curvature_at(self.s[on]) * self.d[on], 0.2)
                self.s[on] += self.dir[on] * ds[on] / stretch
        self.v = v_new

