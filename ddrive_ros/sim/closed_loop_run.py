"""Run planners closed-loop on seeded episodes and score them (PDM-style), method by method.

    runs = run_methods({"constant velocity": lambda w: ConstantVelocityDriver(), ...}, seeds, LoopOptions())

One episode: the expert drives the first 2 s (the history every observation needs); then at each
plan tick (plan_hz, on camera frames) the driver gets the observation at t and returns a plan,
which the controller starts tracking at t + latency (latency fixed, or the measured computing time
rounded up to the 50 ms step). A planner still busy at a tick skips it, as the node does. Until the
first plan arrives the ego holds its speed and steering. The expert row drives the same world with
the expert itself; its progress is every other row's EP reference.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from tqdm import tqdm

from ddrive_ros.plan import Plan
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.controller import TrackingController, WorldPlan
from ddrive_ros.sim.drivers import Driver
from ddrive_ros.sim.scorer import EpisodeScore, aggregate, score_episode
from ddrive_ros.sim.world import FRAME_DT, SIM_DT

log = logging.getLogger(__name__)

EXPERT = "expert"
DriverFactory = Callable[[ClosedLoopWorld], Driver]


@dataclass
class LoopOptions:
    duration_s: float = 8.0  # episode length: 2 s history + 6 s driven by the planner
    plan_hz: float = 5.0
    latency_ms: float | None = None  # None: measured ("auto"); else fixed
    renderer: object | None = None  # the world's camera renderer (default: the training one)

    def plan_every(self) -> int:
        steps = 1.0 / (self.plan_hz * SIM_DT)
        frames = 1.0 / (self.plan_hz * FRAME_DT)
        if abs(frames - round(frames)) > 1e-6 or round(frames) < 1:
            raise ValueError(f"plan_hz {self.plan_hz} must divide the {1 / FRAME_DT:g} Hz camera rate (10, 5, 2.5, 2, 1 ...)")
        return int(round(steps))


@dataclass
class PlanRecord:
    """One plan: observed at step k_obs, tracked from k_apply, in the world frame."""

    k_obs: int
    k_apply: int
    world_plan: WorldPlan
    rollouts_world: list[np.ndarray]
    compute_s: float
    meta: str = ""
    forwards: int | None = None  # backbone forwards the learned planner spent (None: no decoder, or over DDS)


@dataclass
class EpisodeRun:
    seed: int
    method: str
    score: EpisodeScore
    world: ClosedLoopWorld
    plans: list[PlanRecord] = field(default_factory=list)
    world_s: float = 0.0  # wall seconds stepping the world and rendering cameras
    planner_s: float = 0.0  # wall seconds inside the planner
    sim_s: float = 0.0  # simulated seconds driven by the method


def _to_world(xy: np.ndarray, pose: tuple[float, float, float]) -> np.ndarray:
    x0, y0, yaw0 = pose
    c, s = np.cos(yaw0), np.sin(yaw0)
    xy = np.asarray(xy, dtype=float)[:, :2]
    return np.stack([x0 + c * xy[:, 0] - s * xy[:, 1], y0 + s * xy[:, 0] + c * xy[:, 1]], axis=1)


def _meta(plan: Plan) -> str:
    m = plan.meta
    return "" if m is None else f"{m.longitudinal}/{m.lateral} {m.target_speed:.1f} m/s"


def run_episode(seed: int, method: str, factory: DriverFactory | None, opts: LoopOptions,
                expert_progress_m: float | None = None) -> EpisodeRun:
    """Drive one episode with a driver (or the expert when factory is None) and score it."""
    from ddrive_ros.sim.sample import default_renderer

    renderer = opts.renderer or default_renderer()
    world = ClosedLoopWorld(seed, opts.duration_s)
    run = EpisodeRun(seed, method, None, world)  # type: ignore[arg-type]
    t_world = time.perf_counter()
    if factory is None:
        while not world.done:
            world.step_expert()
        run.world_s = time.perf_counter() - t_world
        return _finish(run, expert_progress_m)

    driver = factory(world)
    driver.begin_episode(seed)
    render_s = [0.0]

    def images_at(k: int):
        def render() -> np.ndarray:
            t = time.perf_counter()
            out = world.rendered(k, renderer)
            render_s[0] += time.perf_counter() - t
            return out
        return render

    observe_s = [0.0]

    def feed(w: ClosedLoopWorld) -> None:
        t = time.perf_counter()
        driver.observe(w.state_row(), str(w.nav_command[w.k]), images_at(w.k) if w.is_camera_step() else None)
        observe_s[0] += time.perf_counter() - t  # the node bridge waits for its plans here

    feed(world)
    world.drive_expert_until(world.start_step, feed)
    every = opts.plan_every()
    controller = TrackingController()
    active: WorldPlan | None = None
    pending: list[tuple[int, WorldPlan]] = []
    free_at = world.start_step  # the step from which the planner can take the next tick
    planner_s = 0.0
    while not world.done:
        k = world.k
        t = k * SIM_DT
        if k >= free_at and (k - world.start_step) % every == 0:
            t_p = time.perf_counter()
            plan, compute_s = driver.plan(t)
            planner_s += time.perf_counter() - t_p
            latency_s = compute_s if opts.latency_ms is None else opts.latency_ms / 1000.0
            lag = max(int(math.ceil(latency_s / SIM_DT - 1e-9)), 0)
            if plan.trajectory is None:
                raise ValueError(f"{method}: plan at t={t:.2f} s of episode {seed} has no trajectory")
            pose = (float(world.ego_xy[k, 0]), float(world.ego_xy[k, 1]), float(world.ego_yaw[k]))
            wp = WorldPlan.from_ego_trajectory(plan.trajectory, t, pose, float(world.ego_v[k]))
            pending.append((k + lag, wp))
            run.plans.append(PlanRecord(k, k + lag, wp, [_to_world(r, pose) for r in plan.rollouts], compute_s,
                                        _meta(plan), plan.stats.forwards if plan.stats is not None else None))
            free_at = k + max(lag, 1)
        while pending and pending[0][0] <= k:
            active = pending.pop(0)[1]
        if active is None:  # before the first plan lands: hold speed and steering
            accel, steer = 0.0, world.vehicle.steer
        else:
            accel, steer = controller.command(world.vehicle, active, t)
        world.step(accel, steer)
        feed(world)
    # cameras are rendered lazily inside the driver's calls: that time is the world's, not the planner's
    run.planner_s = planner_s + observe_s[0] - render_s[0]
    run.world_s = time.perf_counter() - t_world - run.planner_s
    return _finish(run, expert_progress_m)


def _finish(run: EpisodeRun, expert_progress_m: float | None) -> EpisodeRun:
    trace = run.world.trace()
    progress = float(trace.route_s[-1] - trace.route_s[0])
    run.score = score_episode(trace, progress if expert_progress_m is None else expert_progress_m)
    run.sim_s = run.score.duration_s
    return run


@dataclass
class MethodResult:
    method: str
    runs: list[EpisodeRun]

    def row(self) -> dict:
        r = aggregate(self.method, [x.score for x in self.runs])
        sim_s = sum(x.sim_s for x in self.runs)
        r["world_s_per_sim_s"] = sum(x.world_s for x in self.runs) / sim_s if sim_s else float("nan")
        r["planner_s_per_sim_s"] = sum(x.planner_s for x in self.runs) / sim_s if sim_s else float("nan")
        plans = [p for x in self.runs for p in x.plans]
        r["plan_ms"] = float(np.mean([p.compute_s for p in plans]) * 1e3) if plans else None
        r["plan_ms_p50"] = float(np.percentile([p.compute_s for p in plans], 50) * 1e3) if plans else None
        r["plan_ms_p90"] = float(np.percentile([p.compute_s for p in plans], 90) * 1e3) if plans else None
        r["latency_ms"] = float(np.mean([(p.k_apply - p.k_obs) * SIM_DT for p in plans]) * 1e3) if plans else None
        # on a stream each plan after the first drafts from the previous one (PlannerOptions.draft_previous)
        forwards = [p.forwards for p in plans if p.forwards is not None]
        r["forwards_per_plan"] = float(np.mean(forwards)) if forwards else None
        return r


def run_methods(factories: dict[str, DriverFactory | None], seeds: list[int], opts: LoopOptions,
                on_episode: Callable[[EpisodeRun], None] | None = None, progress: bool = True) -> list[MethodResult]:
    """Every method on every episode (episode by episode, so a long run reports early). The expert
    runs first on each episode and gives the EP reference; `factories` maps method -> driver factory."""
    results = {name: MethodResult(name, []) for name in [EXPERT, *[m for m in factories if m != EXPERT]]}
    bar = tqdm(seeds, desc="episodes", unit="ep", disable=not progress)
    for seed in bar:
        expert = run_episode(seed, EXPERT, None, opts)
        results[EXPERT].runs.append(expert)
        if on_episode:
            on_episode(expert)
        for name, factory in factories.items():
            if name == EXPERT:
                continue
            bar.set_postfix_str(name)
            run = run_episode(seed, name, factory, opts, expert_progress_m=expert.score.progress_m)
            results[name].runs.append(run)
            if on_episode:
                on_episode(run)
    return list(results.values())


COLUMNS = ["method", "pdms", "nc", "dac", "ep", "ttc", "comfort", "red_light_per_km", "stop_sign_per_km",
           "route_compliance", "collisions_per_km", "at_fault_collisions_per_km", "mean_speed_mps", "accel_swings_per_min",
           "episodes",
           "plan_ms_p50", "plan_ms_p90", "latency_ms", "forwards_per_plan"]


def markdown(rows: list[dict]) -> str:
    fmt = lambda v: "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)
