"""The synthetic driving world: one `Episode` = one scenario simulated at 20 Hz.

The simulation step (0.05 s) divides the camera period (0.1 s), the odometry period (0.05 s) and
the trajectory stamps (0.25 s), so the expert's future at every stamp is a simulated state, not an
interpolation. Everything is a pure function of the seed.

    ep = Episode(seed=3, duration_s=12.0)
    ep.frames              # 10 Hz camera frames
    ep.ego_xy[ep.frames[20].step]
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ddrive_ros.sim.drift import Drift
from ddrive_ros.sim.expert import AgentSnapshot, EgoState, ExpertDriver, Reason
from ddrive_ros.sim.idm import IdmParams
from ddrive_ros.sim.road import Road
from ddrive_ros.sim.route_command import RouteCommand
from ddrive_ros.sim.scenario import (
    EGO_CENTER_OFFSET,
    EGO_WHEELBASE,
    PEDESTRIAN,
    Scenario,
    sample_scenario,
)
from ddrive_ros.sim.traffic import EgoView, LaneTraffic, walker_state

logger = logging.getLogger(__name__)

SIM_DT = 0.05
FRAME_DT = 0.1
STEPS_PER_FRAME = 2


@dataclass(frozen=True)
class Frame:
    index: int  # camera frame number
    step: int  # simulation step
    t: float  # seconds since the episode start


def _on_road(road: Road, sd: tuple[np.ndarray, np.ndarray], margin: float = 0.0) -> np.ndarray:
    s, d = sd
    return (d > road.edge_right - margin) & (d < road.edge_left + margin) & (s > road.ref.s[0]) & (s < road.ref.s[-1])


class Episode:
    """A simulated episode. Arrays are indexed by simulation step (0 .. n_steps-1) at SIM_DT.

    Ego arrays describe base_link (rear-axle centre); agent arrays the centres of their boxes.
    """

    def __init__(self, seed: int, duration_s: float = 12.0, params: IdmParams | None = None,
                 scenario: Scenario | None = None, drift: Drift | None = None) -> None:
        """Episode `seed` of the scenario sampler, or the given scenario (e.g. an edited one). An
        episode shorter than past + future horizon (7 s) simulates but gives no samples. `drift`: the
        expert drifts off its route for a while and recovers (`sim/drift.py`)."""
        self.drift = drift
        if duration_s < 2 * SIM_DT:
            raise ValueError(f"an episode needs at least two simulation steps, got duration {duration_s} s")
        self.seed = int(seed)
        self.duration_s = float(duration_s)
        self.dt = SIM_DT
        self.scenario: Scenario = scenario if scenario is not None else sample_scenario(self.seed, self.duration_s)
        self.n_steps = int(round(self.duration_s / SIM_DT)) + 1
        self.t = np.arange(self.n_steps) * SIM_DT
        self._image_cache: dict[tuple[int, object], np.ndarray] = {}
        self._simulate(params or IdmParams())

    # -- simulation ---------------------------------------------------------------------------
    def _simulate(self, params: IdmParams) -> None:
        sc = self.scenario
        roads = sc.road_map.roads
        main = roads[0]
        traffic = LaneTraffic(sc, params)
        expert = ExpertDriver(sc, params)
        route = sc.ego.route
        drift = self.drift
        x0, y0 = route.path.point_at(sc.ego.s0)
        ego = EgoState(float(x0), float(y0), float(route.path.heading_at(sc.ego.s0)), sc.ego.v0, sc.ego.s0)

        T = self.n_steps
        n_lane, n_walk = traffic.n, len(sc.walkers)
        A = n_lane + n_walk
        self.agent_kind = np.array([a.kind for a in sc.lane_agents] + [PEDESTRIAN] * n_walk, dtype=object)
        self.agent_size = np.array([a.size for a in sc.lane_agents] + [w.size for w in sc.walkers],
                                   dtype=float).reshape(A, 3)
        self.agent_color = np.array([a.color for a in sc.lane_agents] + [(255, 140, 0)] * n_walk,
                                    dtype=np.uint8).reshape(A, 3)
        self.agent_road = np.array([a.road for a in sc.lane_agents] + [w.road for w in sc.walkers], dtype=int)
        self.agent_lane = np.array([a.lane for a in sc.lane_agents] + [-1] * n_walk, dtype=int)
        self.agent_dir = np.concatenate([traffic.dir, np.zeros(n_walk, dtype=int)]).astype(int)
        self.agent_xy = np.zeros((A, T, 2))
        self.agent_yaw = np.zeros((A, T))
        self.agent_v = np.zeros((A, T))
        self.agent_accel = np.zeros((A, T))
        self.agent_on_road = np.zeros((A, T), dtype=bool)  # walkers: on a carriageway
        self.ego_xy = np.zeros((T, 2))
        self.ego_yaw = np.zeros(T)
        self.ego_v = np.zeros(T)
        self.ego_accel = np.zeros(T)
        self.ego_yaw_rate = np.zeros(T)
        self.ego_s = np.zeros(T)  # route arc length
        self.ego_main_sd = np.zeros((T, 2))  # base_link in main-road coordinates
        self.ego_stop_cleared = np.zeros(T, dtype=bool)
        self.reasons: list[Reason] = []
        self.nav_command = np.empty(T, dtype=object)

        half_len = self.agent_size[:, 0] / 2
        half_wid = self.agent_size[:, 1] / 2
        s_main_prev = 0.0
        command = RouteCommand(sc.nav_command, route)
        for k in range(T):
            t = k * SIM_DT
            # other agents now
            lane_xy, lane_yaw = traffic.poses()
            w_sd, w_vel, _, _ = walker_state(sc.walkers, t)
            if n_walk:
                w_xy, w_head = main.ref.pose_at(w_sd[:, 0], w_sd[:, 1])
                vx = w_vel[:, 0] * np.cos(w_head) - w_vel[:, 1] * np.sin(w_head)
                vy = w_vel[:, 0] * np.sin(w_head) + w_vel[:, 1] * np.cos(w_head)
                moving = np.hypot(vx, vy) > 1e-6
                facing = w_head + np.where(np.array([w.vd for w in sc.walkers]) != 0,
                                           np.sign([w.vd for w in sc.walkers]) * np.pi / 2, 0.0)
                w_yaw = np.where(moving, np.arctan2(vy, vx), facing)
                on_road = _on_road(main, (w_sd[:, 0], w_sd[:, 1]))
                for r in roads[1:]:
                    on_road |= _on_road(r, r.ref.project(w_xy))
                w_speed = np.hypot(vx, vy)
            else:
                w_xy, w_yaw, on_road, w_speed = np.zeros((0, 2)), np.zeros(0), np.zeros(0, bool), np.zeros(0)
            self.agent_xy[:, k] = np.concatenate([lane_xy, w_xy])
            self.agent_yaw[:, k] = np.concatenate([lane_yaw, w_yaw])
            self.agent_v[:, k] = np.concatenate([traffic.v, w_speed])
            self.agent_on_road[:, k] = np.concatenate([np.ones(n_lane, bool), on_road])
            if k > 0:
                self.agent_accel[:n_lane, k - 1] = traffic.accel

            # ego now
            self.ego_xy[k] = (ego.x, ego.y)
            self.ego_yaw[k] = ego.yaw
            self.ego_v[k] = ego.v
            self.ego_s[k] = ego.s
            s_m, d_m = main.ref.project(np.array([[ego.x, ego.y]]), s_main_prev - 10.0, s_main_prev + 30.0)
            s_main_prev = float(s_m[0])
            self.ego_main_sd[k] = (s_m[0], d_m[0])
            self.nav_command[k] = command.at(ego.s, float(d_m[0]))

            # decide
            snap = AgentSnapshot(self.agent_xy[:, k], self.agent_yaw[:, k], self.agent_v[:, k], half_len, half_wid,
                                 self.agent_kind)
            accel, reason = expert.longitudinal(ego, t, SIM_DT, snap, traffic, float(d_m[0]))
            steer = expert.steer(ego, drift.offset_at(t) if drift is not None else 0.0)
            self.reasons.append(reason)
            self.ego_stop_cleared[k] = ego.stop_cleared

            # others react to the ego where it is now, then everyone moves
            centre = np.array([ego.x + EGO_CENTER_OFFSET * np.cos(ego.yaw), ego.y + EGO_CENTER_OFFSET * np.sin(ego.yaw)])
            views: list[tuple[float, float] | None] = []
            for i, r in enumerate(roads):
                window = (s_main_prev - 10.0, s_main_prev + 20.0) if i == 0 else (None, None)
                sr, dr = r.ref.project(centre[None], *window)
                views.append((float(sr[0]), float(dr[0])) if _on_road(r, (sr, dr), margin=1.0)[0] else None)
            traffic.step(t, SIM_DT, EgoView(views, ego.yaw, ego.v))

            v_new = max(ego.v + accel * SIM_DT, 0.0)
            self.ego_accel[k] = (v_new - ego.v) / SIM_DT
            yaw_rate = ego.v * np.tan(steer) / EGO_WHEELBASE
            self.ego_yaw_rate[k] = yaw_rate
            v_mid = 0.5 * (ego.v + v_new)
            yaw_mid = ego.yaw + 0.5 * yaw_rate * SIM_DT
            ego.x += v_mid * np.cos(yaw_mid) * SIM_DT
            ego.y += v_mid * np.sin(yaw_mid) * SIM_DT
            ego.yaw += yaw_rate * SIM_DT
            ego.v = v_new
            s_r, _ = route.path.project(np.array([[ego.x, ego.y]]), ego.s - 3.0, ego.s + 3.0 + 2.0 * v_mid * SIM_DT)
            ego.s = float(s_r[0])
        self.agent_accel[:n_lane, T - 1] = traffic.accel
        if n_walk:  # walkers: finite differences of speed
            self.agent_accel[n_lane:] = np.gradient(self.agent_v[n_lane:], SIM_DT, axis=1)

    # -- frames -------------------------------------------------------------------------------
    @cached_property
    def frames(self) -> list[Frame]:
        n = (self.n_steps - 1) // STEPS_PER_FRAME + 1
        return [Frame(i, i * STEPS_PER_FRAME, i * FRAME_DT) for i in range(n)]

    def step_at(self, t: float) -> int:
        """Simulation step at episode time t (must be on the 0.05 s grid)."""
        k = int(round(t / SIM_DT))
        if abs(k * SIM_DT - t) > 1e-6 or not 0 <= k < self.n_steps:
            raise ValueError(f"t={t} is not a simulation step of this {self.duration_s} s episode")
        return k

    @property
    def n_agents(self) -> int:
        return len(self.agent_kind)

    def light_state(self, step: int, road: int = 0) -> str | None:
        inter = self.scenario.road_map.intersection
        if inter is None or inter.light is None:
            return None
        return str(inter.light.state(step * SIM_DT, road))

    def rendered(self, frame_index: int, renderer: "object") -> np.ndarray:
        """(3 cameras, H, W, 3) images of a frame, cached per renderer."""
        key = (frame_index, renderer)  # the renderer itself, not its id: ids are reused after GC
        if key not in self._image_cache:
            self._image_cache[key] = renderer.render(self, self.frames[frame_index].step)  # type: ignore[attr-defined]
        return self._image_cache[key]

    def clear_cache(self) -> None:
        self._image_cache.clear()
