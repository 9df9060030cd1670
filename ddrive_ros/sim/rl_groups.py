"""RL data: groups of sampled plans from the states the planner drives into, each scored in the world.

The planner (with N rollouts at a sampling temperature) drives closed-loop episodes (`ddrive sim`'s
loop: controller, latency, reacting road users). At every plan it makes, each of its N rollouts is
driven for 4 s in a fork of the world and scored by the closed loop's PDM scorer against the expert's
progress from the same state (`sim/fork_score.py`): the rollouts share the prompt and its KV cache
(one decode, N rows), so a group is N answers to one question, the input GRPO normalises rewards
over (`training/grpo.py`). The loop drives the plan the planner returns (the rollouts' mean), so the
states are the ones this planner reaches.

    groups, runs = collect_groups(planner, seed=21, episodes=8)

Each group keeps the observation, the N rollouts' token ids (the planner's layout) and their scores.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from ddrive_ros.observation import Observation
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.closed_loop_run import EXPERT, EpisodeRun, LoopOptions, run_episode
from ddrive_ros.sim.drivers import ModelDriver
from ddrive_ros.sim.fork_score import expert_progress, score_in_fork
from ddrive_ros.sim.sample import episode_seeds
from ddrive_ros.sim.scorer import EpisodeScore
from ddrive_ros.timeline import OUTPUT_TIMES
from ddrive_ros.trajectory import path_yaw_speed, to_trajectory_array

log = logging.getLogger(__name__)


@dataclass
class Group:
    """N sampled plans for one observation and their scores in the world."""

    observation: Observation
    ids: np.ndarray  # (N, L) output token ids
    scores: list[EpisodeScore] = field(default_factory=list)  # one per rollout, 4 s in a fork

    @property
    def rewards(self) -> np.ndarray:
        return np.array([s.pdms for s in self.scores], dtype=float)


class GroupDriver(ModelDriver):
    """The planner, plus a scored group of its rollouts at every plan it makes."""

    def __init__(self, planner, horizon_s: float = 4.0, tail_s: float = 0.0) -> None:
        super().__init__(planner, planner.restart_sampling)
        self.horizon_s = horizon_s
        self.tail_s = tail_s  # the expert drives on this long after each rollout (fork_score.score_in_fork)
        self.groups: list[Group] = []

    def plan(self, t: float):
        if self.world is None:
            raise ValueError("GroupDriver needs bind(world) before planning")
        obs = self.observation(t)
        t0 = time.perf_counter()
        plan, ids = self.model.plan_and_ids(obs)
        compute_s = time.perf_counter() - t0
        if len(plan.rollouts) != ids.shape[0] or ids.shape[0] < 2:
            raise ValueError(f"GroupDriver needs a planner with rollouts >= 2 (got {ids.shape[0]} rows)")
        w = self.world
        v0 = float(w.ego_v[w.k])
        reference = expert_progress(w, self.horizon_s + self.tail_s)
        scores = []
        for xy in plan.rollouts:
            yaw, speed = path_yaw_speed(xy, OUTPUT_TIMES, start_yaw=0.0, start_speed=v0)
            scores.append(score_in_fork(w, to_trajectory_array(OUTPUT_TIMES, xy, yaw, speed), reference, self.horizon_s,
                                        self.tail_s))
        self.groups.append(Group(obs, ids, scores))
        return plan, compute_s


def collect_groups(planner, seed: int, episodes: int, opts: LoopOptions | None = None,
                   progress: bool = True, tail_s: float = 0.0) -> tuple[list[Group], list[EpisodeRun]]:
    """Scored groups from `episodes` closed-loop episodes (episode seeds from `seed`: use seeds no
    evaluation uses) and the episode runs themselves (their closed-loop scores: how the planner drove)."""
    opts = opts or LoopOptions(latency_ms=200.0)
    groups: list[Group] = []
    runs: list[EpisodeRun] = []
    bar = tqdm(episode_seeds(seed, episodes), desc="rl episodes", unit="ep", disable=not progress)
    for ep_seed in bar:
        driver = GroupDriver(planner, tail_s=tail_s)

        def factory(world: ClosedLoopWorld, d: GroupDriver = driver) -> GroupDriver:
            return d.bind(world)

        expert = run_episode(ep_seed, EXPERT, None, opts)
        runs.append(run_episode(ep_seed, "rl", factory, opts, expert_progress_m=expert.score.progress_m))
        groups += driver.groups
        bar.set_postfix(groups=len(groups))
    if not groups:
        raise ValueError(f"rl collection gave no groups ({episodes} episodes, seed {seed})")
    return groups, runs
