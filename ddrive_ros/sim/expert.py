"""The ego's expert driver: pure pursuit on the route, IDM for speed, and the rules of the road.

Longitudinal control is the minimum of IDM accelerations over everything that constrains the ego:
the free road (speed limit, and curvature ahead at 2 m/s^2 lateral acceleration), the nearest road
user in its corridor, the stop line at a red light / a yellow light it can stop for / a stop sign
not yet served, a crosswalk with a pedestrian still to pass the ego's path, oncoming traffic before
a left turn, and the stop point of a STOP command. The binding constraint is kept as the step's
`Reason`: the explanation label is written from it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddrive_ros.sim.idm import IdmParams, can_stop, idm_accel, idm_free
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_FRONT, EGO_WHEELBASE, EGO_WIDTH, Scenario
from ddrive_ros.sim.traffic import STOP_SIGN_DWELL_S, STOP_SIGN_ZONE_M, LaneTraffic, crosswalk_blocked
from ddrive_ros.sim.traffic_light import RED, YELLOW

A_LAT_MAX = 2.0  # m/s^2, lateral acceleration the expert allows in curves and turns
B_PLAN = 1.5  # m/s^2, deceleration it plans with towards a lower speed limit ahead
MAX_STEER = 0.6  # rad
YIELD_HORIZON_S = 3.5  # an oncoming vehicle closer than this to the intersection makes a left turn wait

REASONS = (
    "free",  # nothing ahead constrains the ego: cruise at the speed limit
    "curve",  # slowing for a curve of the road
    "turn",  # slowing for a turn at the intersection
    "lead",  # following a vehicle in the ego's path
    "obstacle",  # a cyclist or pedestrian in the ego's path
    "red_light",
    "yellow_light",
    "stop_sign",
    "crosswalk",  # pedestrians crossing at a crosswalk
    "yield_oncoming",  # waiting for oncoming traffic before a left turn
    "stop_command",  # the navigation command says stop
)


@dataclass(frozen=True)
class Reason:
    kind: str = "free"
    agent: int = -1  # index into the episode's agents when the reason is a road user


@dataclass
class EgoState:
    x: float
    y: float
    yaw: float
    v: float
    s: float  # route arc length of base_link
    stop_dwell: float = 0.0
    stop_cleared: bool = False


@dataclass
class AgentSnapshot:
    xy: np.ndarray  # (A, 2) box centres
    yaw: np.ndarray
    v: np.ndarray
    half_len: np.ndarray
    half_wid: np.ndarray
    kind: np.ndarray  # (A,) str


class ExpertDriver:
    def __init__(self, scenario: Scenario, params: IdmParams | None = None) -> None:
        self.sc = scenario
        self.route = scenario.ego.route
        self.p = params or IdmParams()
        self.v_des = scenario.ego.v_des
        self._ahead = np.arange(0.0, 60.0, 1.0)

    # -- longitudinal -------------------------------------------------------------------------
    def _desired_speed(self, ego: EgoState) -> tuple[float, Reason]:
        """Speed the free-road term aims for: limits ahead, reachable braking at B_PLAN."""
        s = ego.s + self._ahead
        kappa = np.abs(self.route.path.curvature_at(s))
        v_lim = np.minimum(self.route.speed_limit_at(s), np.sqrt(A_LAT_MAX / np.maximum(kappa, 1e-4)))
        v_reach = np.sqrt(v_lim ** 2 + 2.0 * B_PLAN * self._ahead)
        i = int(np.argmin(v_reach))
        v0 = min(self.v_des, float(v_reach[i]))
        if v0 > self.v_des - 0.5:
            return v0, Reason("free")
        turning = self.route.maneuver.endswith("turn") and s[i] >= self.route.maneuver_span[0] - 1.0
        return v0, Reason("turn" if turning else "curve")

    def _corridor(self, ego: EgoState, agents: AgentSnapshot) -> tuple[float, float, int]:
        """Gap and speed along the route of the nearest road user in the ego's path."""
        if len(agents.xy) == 0:
            return np.inf, 0.0, -1
        near = np.hypot(agents.xy[:, 0] - ego.x, agents.xy[:, 1] - ego.y) < 90.0
        if not np.any(near):
            return np.inf, 0.0, -1
        idx = np.flatnonzero(near)
        s_a, l_a = self.route.path.project(agents.xy[idx], ego.s - 5.0, ego.s + 85.0)
        rel = agents.yaw[idx] - self.route.path.heading_at(s_a)
        extent = agents.half_len[idx] * np.abs(np.cos(rel)) + agents.half_wid[idx] * np.abs(np.sin(rel))
        lateral = agents.half_len[idx] * np.abs(np.sin(rel)) + agents.half_wid[idx] * np.abs(np.cos(rel))
        inside = (np.abs(l_a) < EGO_WIDTH / 2 + lateral + 0.4) & (s_a > ego.s + EGO_CENTER_OFFSET)
        if not np.any(inside):
            return np.inf, 0.0, -1
        gap = np.where(inside, s_a - extent - (ego.s + EGO_FRONT), np.inf)
        j = int(np.argmin(gap))
        v_lead = max(float(agents.v[idx[j]] * np.cos(rel[j])), 0.0)
        return float(gap[j]), v_lead, int(idx[j])

    def _oncoming_conflict(self, traffic: LaneTraffic) -> int:
        """Index of an oncoming vehicle that makes a left turn unsafe now, or -1."""
        inter = self.sc.road_map.intersection
        cand = (traffic.road == 0) & (traffic.dir < 0)
        if inter is None or not np.any(cand):
            return -1
        front_s = traffic.s - traffic.half_len  # they drive towards -s
        dist = front_s - inter.main_box[1]
        not_through = traffic.s + traffic.half_len > inter.main_box[0]
        conflict = cand & not_through & (dist < np.maximum(traffic.v, 0.0) * YIELD_HORIZON_S + 3.0)
        hits = np.flatnonzero(conflict)
        return int(hits[np.argmin(dist[hits])]) if len(hits) else -1

    def longitudinal(self, ego: EgoState, t: float, dt: float, agents: AgentSnapshot, traffic: LaneTraffic,
                     d_main: float) -> tuple[float, Reason]:
        p = self.p
        v = ego.v
        front = ego.s + EGO_FRONT
        v0, free_reason = self._desired_speed(ego)
        options: list[tuple[float, Reason]] = [(float(idm_free(v, v0, p)), free_reason)]

        gap, v_lead, j = self._corridor(ego, agents)
        if j >= 0:
            kind = "lead" if agents.kind[j] == "vehicle" else "obstacle"
            options.append((float(idm_accel(v, v0, gap, v_lead, p)), Reason(kind, j)))

        def line(mark: float, reason: Reason, max_decel: float = 7.0, s0: float | None = None) -> None:
            g = mark - front
            if g > -0.3 and bool(can_stop(v, max(g, 0.01), max_decel)):
                options.append((float(idm_accel(v, v0, g, 0.0, p, s0=p.s0_line if s0 is None else s0)), reason))

        inter = self.sc.road_map.intersection
        marks = self.sc.marks
        if inter is not None:
            g = marks["stop_line"] - front
            if inter.control == "light":
                state = str(inter.light.state(t, 0))
                if state == RED:
                    line(marks["stop_line"], Reason("red_light"))
                elif state == YELLOW:
                    line(marks["stop_line"], Reason("yellow_light"), max_decel=3.0)
            else:
                if -0.3 < g < STOP_SIGN_ZONE_M and v < 0.3:
                    ego.stop_dwell += dt
                else:
                    ego.stop_dwell = 0.0
                if ego.stop_dwell >= STOP_SIGN_DWELL_S or g < -0.3:
                    ego.stop_cleared = True
                if not ego.stop_cleared:
                    line(marks["stop_line"], Reason("stop_sign"))
            if self.route.maneuver == "left_turn" and g > -0.3:
                k = self._oncoming_conflict(traffic)
                if k >= 0:
                    line(marks["stop_line"], Reason("yield_oncoming", k), max_decel=6.0)
        for i, mark in enumerate(self.sc.crosswalk_marks):
            if crosswalk_blocked(self.sc.walkers, i, t, d_path=d_main):
                line(mark, Reason("crosswalk"), max_decel=6.0)
        if self.sc.ego.stop_target is not None:
            line(self.sc.ego.stop_target, Reason("stop_command"), max_decel=9.0, s0=0.5)

        accels = [a for a, _ in options]
        k = int(np.argmin(accels))
        return accels[k], options[k][1]

    # -- lateral ------------------------------------------------------------------------------
    def steer(self, ego: EgoState, offset_m: float = 0.0) -> float:
        """Pure pursuit on the route from the rear axle; `offset_m` shifts the pursued point that far to
        the left of the route (negative: right), for drift-and-recover episodes (`sim/drift.py`)."""
        lookahead = float(np.clip(3.0 + 0.45 * ego.v, 4.0, 12.0))
        tx, ty = self.route.path.point_at(ego.s + lookahead)
        if offset_m:
            h = float(self.route.path.heading_at(ego.s + lookahead))
            tx, ty = tx - offset_m * np.sin(h), ty + offset_m * np.cos(h)
        dx, dy = tx - ego.x, ty - ego.y
        c, s = np.cos(ego.yaw), np.sin(ego.yaw)
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        dist = max(np.hypot(lx, ly), 1e-3)
        alpha = np.arctan2(ly, lx)
        return float(np.clip(np.arctan2(2.0 * EGO_WHEELBASE * np.sin(alpha), dist), -MAX_STEER, MAX_STEER))
