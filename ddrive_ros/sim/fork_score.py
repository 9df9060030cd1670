"""Score a candidate plan by driving it in a copy of the closed-loop world.

The world is forked (its road map and image cache shared, everything that moves copied: the ego,
the traffic, the walkers' schedules), the candidate is tracked by the loop's controller for
`horizon_s` while the other road users react as they would in the real loop, and the fork's trace
is scored by the closed loop's own PDM scorer against the expert's progress over the same horizon
(the expert driving a second fork). This is the scorer with perfect foresight of the world: what
the best-of-N oracle row selects by. It is privileged; no planner on a car can do this.

    fork(world) -> ClosedLoopWorld
    expert_ahead(world, horizon_s) -> a fork the expert has driven for the horizon from here
    expert_progress(world, horizon_s) -> metres the expert would make from here
    score_in_fork(world, trajectory, expert_progress_m, horizon_s, tail_s) -> EpisodeScore
"""
from __future__ import annotations

import copy

import numpy as np

from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.controller import TrackingController, WorldPlan
from ddrive_ros.sim.scorer import EpisodeScore, score_episode
from ddrive_ros.sim.world import SIM_DT

HORIZON_S = 4.0  # NAVSIM's horizon, as in the open-loop PDM of `ddrive eval`


def fork(world: ClosedLoopWorld) -> ClosedLoopWorld:
    """An independent copy of the world at its current step; the static map and the image cache are shared."""
    keep = {id(world.scenario.road_map): world.scenario.road_map, id(world._image_cache): world._image_cache}
    return copy.deepcopy(world, keep)


def _steps(world: ClosedLoopWorld, horizon_s: float) -> int:
    return min(int(round(horizon_s / SIM_DT)), world.n_steps - 1 - world.k)


def expert_ahead(world: ClosedLoopWorld, horizon_s: float = HORIZON_S) -> ClosedLoopWorld:
    """A fork in which the expert has driven from the world's current state for the horizon (or to the
    episode's end, or until the fork ended early: check `done` and `k`)."""
    f = fork(world)
    f.drive_expert_until(world.k + _steps(world, horizon_s))
    return f


def expert_progress(world: ClosedLoopWorld, horizon_s: float = HORIZON_S) -> float:
    """Route metres the expert makes from the world's current state over the horizon (or to the episode end)."""
    f = expert_ahead(world, horizon_s)
    return float(f.ego_s[f.k] - f.ego_s[world.k])


def score_in_fork(world: ClosedLoopWorld, trajectory: np.ndarray, expert_progress_m: float,
                  horizon_s: float = HORIZON_S, tail_s: float = 0.0) -> EpisodeScore:
    """Track `trajectory` ((N, >=3) t, x, y, ... in the ego frame now) in a fork for the horizon and score it.
    `tail_s` > 0: the expert then drives on from where the trajectory left the ego, and the score covers
    both, so a plan that makes a later collision unavoidable (too fast, too close) is charged for it;
    `expert_progress_m` must then be the expert's progress over horizon + tail."""
    f = fork(world)
    k0 = f.k
    pose = (float(f.ego_xy[k0, 0]), float(f.ego_xy[k0, 1]), float(f.ego_yaw[k0]))
    plan = WorldPlan.from_ego_trajectory(trajectory, k0 * SIM_DT, pose, float(f.ego_v[k0]))
    controller = TrackingController()
    for _ in range(_steps(world, horizon_s)):
        if f.done:
            break
        f.step(*controller.command(f.vehicle, plan, f.k * SIM_DT))
    if tail_s > 0:
        f.drive_expert_until(min(f.k + int(round(tail_s / SIM_DT)), world.n_steps - 1))
    return score_episode(f.trace(start=k0), expert_progress_m)
