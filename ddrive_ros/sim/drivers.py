"""The planner side of the closed loop: the `Driver` interface and the in-process drivers.

A driver sees what a vehicle's planner sees, step by step (`observe`: odometry at 20 Hz, cameras
at 10 Hz, the navigation command), and when the loop asks (`plan`) returns a `Plan` for the
observation at that instant together with the seconds its computation took (the measured latency).

    ModelDriver            the learned planner in this process (anything with .plan(Observation))
    ConstantVelocityDriver holds speed and yaw rate (the trivial baseline)
    IdmPlannerDriver       rule-based: the route's lane centre, speed by IDM with the rules of the
                           road, other road users predicted at constant velocity (privileged map
                           and object knowledge, like nuPlan's IDM planner)

The ROS bridge (ddrive_ros/ros/sim_bridge.py) implements the same methods over DDS against the
real node; `ddrive_ros/commands/sim.py` wires it in, so this package never imports rclpy.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Protocol

import numpy as np

from ddrive_ros.evaluation.metrics import constant_velocity_prediction
from ddrive_ros.observation import Observation
from ddrive_ros.observation_recipe import EgoTrack, assemble
from ddrive_ros.plan import Plan
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.expert import AgentSnapshot, EgoState, ExpertDriver
from ddrive_ros.sim.world import SIM_DT
from ddrive_ros.timeline import FRAME_HISTORY_S, OUTPUT_TIMES
from ddrive_ros.trajectory import path_yaw_speed, to_trajectory_array, world_to_ego

ImageSource = Callable[[], np.ndarray]  # renders (3 cameras, H, W, 3) RGB on demand


class Driver(Protocol):
    def begin_episode(self, seed: int) -> None: ...

    def observe(self, state: np.ndarray, nav_command: str, images: ImageSource | None) -> None:
        """state = (t, x, y, yaw, v, yaw_rate) in the world's fixed frame; images at camera steps."""

    def plan(self, t: float) -> tuple[Plan, float]:
        """A plan for the observation at t (ego frame at t) and the seconds it took."""


class PlanningModel(Protocol):
    def plan(self, obs: Observation) -> Plan: ...


def trajectory_plan(xy: np.ndarray, stamp: float, v0: float, schema: str) -> Plan:
    """A Plan carrying only a trajectory (ego frame at `stamp`, at OUTPUT_TIMES)."""
    yaw, speed = path_yaw_speed(xy, OUTPUT_TIMES, start_yaw=0.0, start_speed=v0)
    return Plan(schema=schema, waypoints=np.asarray(xy, dtype=float), waypoint_times=OUTPUT_TIMES.copy(),
                trajectory=to_trajectory_array(OUTPUT_TIMES, xy, yaw, speed), stamp=stamp)


class _History:
    """Odometry rows and lazy camera frames seen so far in an episode."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.frames: dict[int, ImageSource] = {}
        self.nav: dict[int, str] = {}

    def add(self, state: np.ndarray, nav: str, images: ImageSource | None) -> None:
        k = int(round(state[0] / SIM_DT))
        self.rows.append(np.asarray(state, dtype=float))
        self.nav[k] = nav
        if images is not None:
            self.frames[k] = images

    def step_of(self, t: float) -> int:
        k = int(round(t / SIM_DT))
        if k not in self.nav:
            raise ValueError(f"no observation recorded at t={t:.2f} s (last {self.rows[-1][0] if self.rows else None})")
        return k


class ModelDriver:
    """The learned planner in-process: the observation by the shared recipe from what it observed.
    With `context_of`, each plan also gets the world's true obstacles and lanes (perfect perception)
    for safety-guided reflection; building that context is not counted as planning time."""

    def __init__(self, model: PlanningModel, restart: Callable[[], None] | None = None,
                 context_of: Callable[[ClosedLoopWorld], object] | None = None) -> None:
        self.model = model
        self.restart = restart  # e.g. Planner.restart_sampling: same seed, same rollouts per episode
        self.history = _History()
        self.context_of = context_of
        self.world: ClosedLoopWorld | None = None

    def bind(self, world: ClosedLoopWorld) -> "ModelDriver":
        """The episode's world (the run's driver factory calls this)."""
        self.world = world
        return self

    def begin_episode(self, seed: int) -> None:
        self.history = _History()
        if self.restart is not None:
            self.restart()

    def observe(self, state: np.ndarray, nav_command: str, images: ImageSource | None) -> None:
        self.history.add(state, nav_command, images)

    def observation(self, t: float) -> Observation:
        h = self.history
        k = h.step_of(t)
        k_prev = k - int(round(FRAME_HISTORY_S / SIM_DT))
        if k not in h.frames or k_prev not in h.frames:
            raise ValueError(f"cameras at steps {k_prev} and {k} are needed for a plan at t={t:.2f} s")
        track = EgoTrack.from_rows(np.stack(h.rows))
        return assemble([h.frames[k_prev](), h.frames[k]()], track, t, h.nav[k], stamp=t)

    def plan(self, t: float) -> tuple[Plan, float]:
        obs = self.observation(t)
        if self.context_of is not None:
            if self.world is None:
                raise ValueError("ModelDriver with context_of needs bind(world) before planning")
            context = self.context_of(self.world)
            t0 = time.perf_counter()
            plan = self.model.plan(obs, context)
        else:
            t0 = time.perf_counter()
            plan = self.model.plan(obs)
        return plan, time.perf_counter() - t0


class BestOfNDriver(ModelDriver):
    """Oracle headroom: the planner's N rollouts, each driven for 4 s in a copy of the world (the other
    road users reacting) and scored by the closed loop's PDM scorer (`sim/fork_score.py`); the plan drives
    the best-scoring rollout (ties to the longer progress) instead of the rollouts' mean. Privileged
    (perfect foresight of the world): a measure of the headroom in the rollouts, not a planner to ship."""

    def plan(self, t: float) -> tuple[Plan, float]:
        from ddrive_ros.sim.fork_score import expert_progress, score_in_fork

        plan, compute_s = super().plan(t)
        if len(plan.rollouts) < 2:
            raise ValueError("BestOfNDriver needs a planner with rollouts >= 2")
        if self.world is None:
            raise ValueError("BestOfNDriver needs bind(world)")
        w = self.world
        v0 = float(w.ego_v[w.k])
        reference = expert_progress(w)
        candidates = []
        for xy in plan.rollouts:
            yaw, speed = path_yaw_speed(xy, OUTPUT_TIMES, start_yaw=0.0, start_speed=v0)
            candidates.append(to_trajectory_array(OUTPUT_TIMES, xy, yaw, speed))
        scores = [score_in_fork(w, traj, reference) for traj in candidates]
        best = max(range(len(scores)), key=lambda i: (scores[i].pdms, scores[i].progress_m))
        plan.trajectory = candidates[best]
        return plan, compute_s


class ConstantVelocityDriver:
    """Holds the current speed and yaw rate for the whole horizon."""

    def __init__(self) -> None:
        self.last = np.zeros(6)

    def begin_episode(self, seed: int) -> None:
        self.last = np.zeros(6)

    def observe(self, state: np.ndarray, nav_command: str, images: ImageSource | None) -> None:
        self.last = np.asarray(state, dtype=float)

    def plan(self, t: float) -> tuple[Plan, float]:
        t0 = time.perf_counter()
        _, _, _, _, v, w = self.last
        xy = constant_velocity_prediction(v, w, OUTPUT_TIMES)
        return trajectory_plan(xy, t, v, "constant_velocity"), time.perf_counter() - t0


IDM_ROLLOUT_DT = 0.1  # s: step of the IDM planner's forward simulation


class IdmPlannerDriver:
    """Rule-based planner: the route's lane centre at the speed the expert's rules give when
    rolled forward 5 s with every other road user moving on at constant velocity.

    It reads the world (map, route, agents, lights) the way nuPlan's IDM planner reads the map and
    tracked objects; it plans at the loop's rate, with the loop's latency, through the controller.
    """

    def __init__(self, world: ClosedLoopWorld) -> None:
        self.world = world
        self.expert = ExpertDriver(world.scenario, world.p)
        self.state: EgoState | None = None

    def begin_episode(self, seed: int) -> None:
        self.state = None

    def observe(self, state: np.ndarray, nav_command: str, images: ImageSource | None) -> None:
        w, k = self.world, self.world.k
        t, x, y, yaw, v, _ = state
        if self.state is None:
            self.state = EgoState(x, y, yaw, v, float(w.ego_s[k]))
        self.state.x, self.state.y, self.state.yaw, self.state.v, self.state.s = x, y, yaw, v, float(w.ego_s[k])
        # keeps the stop-sign bookkeeping (dwell at the line) of the driven ego up to date
        self.expert.longitudinal(self.state, t, SIM_DT, self._agents(0.0), w.traffic, float(w.ego_main_sd[k, 1]))

    def _agents(self, tau: float) -> AgentSnapshot:
        w, k = self.world, self.world.k
        yaw = w.agent_yaw[:, k]
        xy = w.agent_xy[:, k] + tau * w.agent_v[:, k, None] * np.stack([np.cos(yaw), np.sin(yaw)], -1)
        return AgentSnapshot(xy, yaw, w.agent_v[:, k], w.agent_size[:, 0] / 2, w.agent_size[:, 1] / 2, w.agent_kind)

    def plan(self, t: float) -> tuple[Plan, float]:
        if self.state is None:
            raise RuntimeError("IdmPlannerDriver.plan before any observation")
        t0 = time.perf_counter()
        w, k = self.world, self.world.k
        sim = dataclasses.replace(self.state)
        n = int(round(OUTPUT_TIMES[-1] / IDM_ROLLOUT_DT))
        s = np.zeros(n + 1)
        s[0] = sim.s
        for i in range(n):
            tau = i * IDM_ROLLOUT_DT
            a, _ = self.expert.longitudinal(sim, t + tau, IDM_ROLLOUT_DT, self._agents(tau), w.traffic,
                                            float(w.ego_main_sd[k, 1]))
            v_new = max(sim.v + a * IDM_ROLLOUT_DT, 0.0)
            sim.s += 0.5 * (sim.v + v_new) * IDM_ROLLOUT_DT
            sim.v = v_new
            s[i + 1] = sim.s
        s_out = np.interp(OUTPUT_TIMES, np.arange(n + 1) * IDM_ROLLOUT_DT, s)
        pts = w.scenario.ego.route.path.point_at(s_out)
        xy = world_to_ego(pts, (self.state.x, self.state.y), self.state.yaw)
        return trajectory_plan(xy, t, self.state.v, "idm_planner"), time.perf_counter() - t0
