"""The closed-loop world: the synthetic world stepped at 20 Hz with the ego driven from outside.

    world = ClosedLoopWorld(seed, duration_s=8.0)
    world.drive_expert_until(world.start_step)     # the 2 s of history every observation needs
    while not world.done:
        world.step(accel, steer)                     # or world.step_expert()
    trace = world.trace()                            # the scored part, for sim/scorer.py

It is `world.Episode`'s simulation, unrolled: the same scenario from the seed, the same lane traffic
(IDM, reacting to where the ego actually is) and the same expert for the history, but one step at a
time so that a planner can close the loop. Pedestrians waiting to cross yield: one about to step
onto a crosswalk that the ego is on, or about to reach, waits (its start is pushed back a step),
which every other driver sees through the shared walker specs. The ego is a kinematic bicycle with
actuator limits (sim/controller.py). An episode ends at its duration, at the first collision, or
when the ego's box centre leaves the carriageway.

The arrays have `Episode`'s names and layout, filled as the world steps, so the renderer draws a
closed-loop world exactly as it draws an episode.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ddrive_ros.sim.controller import VehicleState
from ddrive_ros.sim.expert import AgentSnapshot, EgoState, ExpertDriver
from ddrive_ros.sim.idm import IdmParams
from ddrive_ros.sim.road import Road
from ddrive_ros.sim.route_command import RouteCommand
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_LENGTH, EGO_WHEELBASE, PEDESTRIAN, sample_scenario
from ddrive_ros.sim.scorer import EGO_HALF, EgoTrace, boxes_overlap, ego_box_centre, on_drivable
from ddrive_ros.sim.traffic import EgoView, LaneTraffic, walker_state
from ddrive_ros.sim.world import FRAME_DT, SIM_DT, STEPS_PER_FRAME
from ddrive_ros.timeline import PAST_HORIZON_S

log = logging.getLogger(__name__)

HISTORY_S = PAST_HORIZON_S  # the expert drives this long first: every observation needs 2 s of past
YIELD_ZONE_M = 8.0  # a waiting pedestrian yields while the ego box is within this of the crosswalk (along the road)
MAX_SPEED_FOR_RANGE = 16.0  # m/s: bound on ego speed, only to size the renderer's road range


def _on_road(road: Road, s: np.ndarray, d: np.ndarray, margin: float = 0.0) -> np.ndarray:
    return (d > road.edge_right - margin) & (d < road.edge_left + margin) & (s > road.ref.s[0]) & (s < road.ref.s[-1])


class ClosedLoopWorld:
    def __init__(self, seed: int, duration_s: float = 8.0, history_s: float = HISTORY_S,
                 params: IdmParams | None = None) -> None:
        if duration_s < history_s + 1.0:
            raise ValueError(f"duration_s ({duration_s}) must exceed the {history_s} s history by at least 1 s")
        self.seed = int(seed)
        self.duration_s = float(duration_s)
        self.dt = SIM_DT
        self.scenario = sample_scenario(self.seed, self.duration_s)  # a fresh object: walker specs may be edited
        self.n_steps = int(round(self.duration_s / SIM_DT)) + 1
        self.start_step = int(round(history_s / SIM_DT))
        self.t = np.arange(self.n_steps) * SIM_DT
        sc = self.scenario
        self.p = params or IdmParams()
        self.traffic = LaneTraffic(sc, self.p)
        self.expert = ExpertDriver(sc, self.p)
        route = sc.ego.route
        x0, y0 = route.path.point_at(sc.ego.s0)
        self.ego = EgoState(float(x0), float(y0), float(route.path.heading_at(sc.ego.s0)), sc.ego.v0, sc.ego.s0)
        self.vehicle = VehicleState(self.ego.x, self.ego.y, self.ego.yaw, self.ego.v)

        T, n_lane, n_walk = self.n_steps, self.traffic.n, len(sc.walkers)
        A = n_lane + n_walk
        self.agent_kind = np.array([a.kind for a in sc.lane_agents] + [PEDESTRIAN] * n_walk, dtype=object)
        self.agent_size = np.array([a.size for a in sc.lane_agents] + [w.size for w in sc.walkers], dtype=float).reshape(A, 3)
        self.agent_color = np.array([a.color for a in sc.lane_agents] + [(255, 140, 0)] * n_walk,
                                    dtype=np.uint8).reshape(A, 3)
        self.agent_xy = np.zeros((A, T, 2))
        self.agent_yaw = np.zeros((A, T))
        self.agent_v = np.zeros((A, T))
        self.agent_accel = np.zeros((A, T))
        self.ego_xy = np.zeros((T, 2))
        self.ego_yaw = np.zeros(T)
        self.ego_v = np.zeros(T)
        self.ego_accel = np.zeros(T)
        self.ego_yaw_rate = np.zeros(T)
        self.ego_s = np.zeros(T)  # route arc length of base_link
        self.ego_d = np.zeros(T)  # signed lateral offset from the route
        self.ego_main_sd = np.zeros((T, 2))
        self.nav_command = np.empty(T, dtype=object)
        self.light = np.full(T, "", dtype=object)
        # main-road s range the renderer builds its static scene for (the ego starts at main s = 0)
        self.render_s_range = (-40.0, MAX_SPEED_FOR_RANGE * self.duration_s + 160.0)
        self._half = self.agent_size[:, :2] / 2.0
        self._s_main_prev = 0.0
        self._command = RouteCommand(sc.nav_command, sc.ego.route)
        self._image_cache: dict[tuple[int, object], np.ndarray] = {}
        self.k = 0
        self.done = False
        self.terminated = "running"
        self.collided_with = -1
        self._record()

    # -- bookkeeping -----------------------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        return len(self.agent_kind)

    def light_state(self, step: int, road: int = 0) -> str | None:
        inter = self.scenario.road_map.intersection
        if inter is None or inter.light is None:
            return None
        return str(inter.light.state(step * SIM_DT, road))

    def _walkers(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World centres, headings and speeds of the walkers at t."""
        sc = self.scenario
        main = sc.road_map.main
        if not sc.walkers:
            return np.zeros((0, 2)), np.zeros(0), np.zeros(0)
        w_sd, w_vel, _, _ = walker_state(sc.walkers, t)
        w_xy, w_head = main.ref.pose_at(w_sd[:, 0], w_sd[:, 1])
        vx = w_vel[:, 0] * np.cos(w_head) - w_vel[:, 1] * np.sin(w_head)
        vy = w_vel[:, 0] * np.sin(w_head) + w_vel[:, 1] * np.cos(w_head)
        vd = np.array([w.vd for w in sc.walkers])
        facing = w_head + np.where(vd != 0, np.sign(vd) * np.pi / 2, 0.0)
        moving = np.hypot(vx, vy) > 1e-6
        return w_xy, np.where(moving, np.arctan2(vy, vx), facing), np.hypot(vx, vy)

    def _record(self) -> None:
        """Fill step k's arrays from the current state, then check for the end of the episode."""
        k, sc = self.k, self.scenario
        t = k * SIM_DT
        lane_xy, lane_yaw = self.traffic.poses()
        w_xy, w_yaw, w_v = self._walkers(t)
        self.agent_xy[:, k] = np.concatenate([lane_xy, w_xy])
        self.agent_yaw[:, k] = np.concatenate([lane_yaw, w_yaw])
        self.agent_v[:, k] = np.concatenate([self.traffic.v, w_v])
        self.agent_accel[:self.traffic.n, k] = self.traffic.accel
        e = self.ego
        self.ego_xy[k] = (e.x, e.y)
        self.ego_yaw[k] = e.yaw
        self.ego_v[k] = e.v
        s_r, d_r = sc.ego.route.path.project(np.array([[e.x, e.y]]), e.s - 3.0, e.s + 3.0 + 2.0 * e.v * SIM_DT + 1.0)
        e.s = float(s_r[0])
        self.ego_s[k], self.ego_d[k] = e.s, float(d_r[0])
        main = sc.road_map.main
        s_m, d_m = main.ref.project(np.array([[e.x, e.y]]), self._s_main_prev - 10.0, self._s_main_prev + 30.0)
        self._s_main_prev = float(s_m[0])
        self.ego_main_sd[k] = (s_m[0], d_m[0])
        self.nav_command[k] = self._command.at(e.s, float(d_m[0]))
        self.light[k] = self.light_state(k) or ""
        # the end of the episode: collision, off the carriageway, or out of time
        centre = ego_box_centre(self.ego_xy[k], np.array(e.yaw))
        if self.n_agents:
            hit = boxes_overlap(centre[None], np.array([e.yaw]), EGO_HALF, self.agent_xy[:, k], self.agent_yaw[:, k], self._half)
            if hit.any():
                self.done, self.terminated, self.collided_with = True, "collision", int(np.argmax(hit))
                return
        if not on_drivable(sc.road_map, centre[None])[0]:
            self.done, self.terminated = True, "off_road"
            return
        if k >= self.n_steps - 1:
            self.done, self.terminated = True, "duration"

    # -- stepping ----------------------------------------------------------------------------------
    def _snapshot(self) -> AgentSnapshot:
        k = self.k
        return AgentSnapshot(self.agent_xy[:, k], self.agent_yaw[:, k], self.agent_v[:, k], self._half[:, 0],
                             self._half[:, 1], self.agent_kind)

    def expert_command(self) -> tuple[float, float]:
        """What the expert would do now: (acceleration, road-wheel angle)."""
        accel, _ = self.expert.longitudinal(self.ego, self.k * SIM_DT, SIM_DT, self._snapshot(), self.traffic,
                                            float(self.ego_main_sd[self.k, 1]))
        return float(accel), float(self.expert.steer(self.ego))

    def _yield_pedestrians(self, t: float) -> None:
        """A pedestrian about to step onto a crosswalk waits while the ego is on it or close to it."""
        sc = self.scenario
        if not sc.road_map.crosswalks:
            return
        s_c = float(self.ego_main_sd[self.k, 0]) + EGO_CENTER_OFFSET
        for w in sc.walkers:
            if w.crosswalk < 0 or not (w.t_start - SIM_DT <= t < w.t_start + 1e-9):
                continue
            cw = sc.road_map.crosswalks[w.crosswalk]
            near = cw.s_lo - YIELD_ZONE_M - EGO_LENGTH / 2 <= s_c <= cw.s_hi + EGO_LENGTH / 2
            if near and self.ego.v > 0.5:
                w.t_start += SIM_DT
                w.t_stop += SIM_DT

    def step(self, accel: float, steer: float) -> None:
        """Advance one step with the ego commanded (limits applied by the vehicle model)."""
        self._advance(accel, steer, expert=False)

    def step_expert(self) -> None:
        self._advance(*self.expert_command(), expert=True)

    def drive_expert_until(self, step: int, on_step: Callable[["ClosedLoopWorld"], None] | None = None) -> None:
        while self.k < step and not self.done:
            self.step_expert()
            if on_step is not None:
                on_step(self)

    def _advance(self, accel: float, steer: float, expert: bool) -> None:
        if self.done:
            raise RuntimeError(f"episode {self.seed} already ended ({self.terminated}) at step {self.k}")
        sc, e, k = self.scenario, self.ego, self.k
        t = k * SIM_DT
        self._yield_pedestrians(t)
        # others react to the ego where it is now (as in Episode), then everyone moves
        centre = ego_box_centre(np.array([e.x, e.y]), np.array(e.yaw))
        views: list[tuple[float, float] | None] = []
        for i, r in enumerate(sc.road_map.roads):
            window = (self._s_main_prev - 10.0, self._s_main_prev + 20.0) if i == 0 else (None, None)
            sr, dr = r.ref.project(centre[None], *window)
            views.append((float(sr[0]), float(dr[0])) if _on_road(r, sr, dr, margin=1.0)[0] else None)
        self.traffic.step(t, SIM_DT, EgoView(views, e.yaw, e.v))
        if expert:
            # the expert's own plant (as in Episode): no steering-rate limit
            v_new = max(e.v + accel * SIM_DT, 0.0)
            a = (v_new - e.v) / SIM_DT
            yaw_rate = e.v * np.tan(steer) / EGO_WHEELBASE
            v_mid = 0.5 * (e.v + v_new)
            yaw_mid = e.yaw + 0.5 * yaw_rate * SIM_DT
            e.x += v_mid * np.cos(yaw_mid) * SIM_DT
            e.y += v_mid * np.sin(yaw_mid) * SIM_DT
            e.yaw += yaw_rate * SIM_DT
            e.v = v_new
            self.vehicle = VehicleState(e.x, e.y, e.yaw, e.v, float(steer))
        else:
            a, yaw_rate = self.vehicle.step(accel, steer, SIM_DT)
            e.x, e.y, e.yaw, e.v = self.vehicle.x, self.vehicle.y, self.vehicle.yaw, self.vehicle.v
        self.ego_accel[k] = a
        self.ego_yaw_rate[k] = yaw_rate
        self.k = k + 1
        self._record()

    # -- what planners see -------------------------------------------------------------------------
    def state_row(self, k: int | None = None) -> np.ndarray:
        """(t, x, y, yaw, v, yaw_rate) at step k: what /odom carries. The yaw rate of step k is the one
        the ego turned with into step k."""
        k = self.k if k is None else k
        w = self.ego_yaw_rate[k - 1] if k > 0 else 0.0
        return np.array([k * SIM_DT, *self.ego_xy[k], self.ego_yaw[k], self.ego_v[k], w])

    def is_camera_step(self, k: int | None = None) -> bool:
        return (self.k if k is None else k) % STEPS_PER_FRAME == 0

    def rendered(self, step: int, renderer: object) -> np.ndarray:
        """(3 cameras, H, W, 3) images at a camera step (cached per renderer)."""
        if step % STEPS_PER_FRAME or step > self.k:
            raise ValueError(f"step {step} is not a camera step up to now ({self.k}); cameras run at {1 / FRAME_DT:g} Hz")
        key = (step, renderer)
        if key not in self._image_cache:
            self._image_cache[key] = renderer.render(self, step)  # type: ignore[attr-defined]
        return self._image_cache[key]

    def clear_cache(self) -> None:
        self._image_cache.clear()

    # -- what the scorer sees ----------------------------------------------------------------------
    def trace(self, start: int | None = None) -> EgoTrace:
        """The driven part from `start` (default: the end of the history) to now."""
        a = self.start_step if start is None else start
        b = self.k + 1
        inter = self.scenario.road_map.intersection
        return EgoTrace(
            dt=SIM_DT, ego_xy=self.ego_xy[a:b].copy(), ego_yaw=self.ego_yaw[a:b].copy(), ego_v=self.ego_v[a:b].copy(),
            route_s=self.ego_s[a:b].copy(), route_d=self.ego_d[a:b].copy(), agent_xy=self.agent_xy[:, a:b].copy(),
            agent_yaw=self.agent_yaw[:, a:b].copy(), agent_v=self.agent_v[:, a:b].copy(), agent_half=self._half.copy(),
            agent_kind=tuple(str(x) for x in self.agent_kind), road_map=self.scenario.road_map,
            light_main=self.light[a:b].copy() if inter is not None and inter.light is not None else None,
            stop_line_s=self.scenario.marks.get("stop_line"),
            stop_sign=inter is not None and inter.control == "stop_sign", terminated=self.terminated)
