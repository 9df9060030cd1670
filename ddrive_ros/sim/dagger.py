"""DAgger data: the states the learned planner drives into, labelled by the expert.

The planner drives closed-loop episodes (`ddrive sim`'s loop: controller, latency, reacting road
users). At every plan it makes, the world is forked (`sim/fork_score.expert_ahead`) and the expert drives
the fork for the label horizon from where the planner has brought the ego; that future, in the ego
frame of the plan's observation, is the trajectory label of exactly the observation the planner
saw. These are the states imitation learning never shows the model (drifted off the lane centre,
too close, too slow), with the expert's way back.

    samples = collect(Planner.from_checkpoint("trajectory_only_tiny"), seed=5, episodes=60)

The trajectory is labelled; with `label_meta` the meta behaviour is too, by the same rule the world's samples use
(`sim/labels.meta_behavior`, read from the fork: the expert's speed and heading 5 s on from the visited state, and
the route's manoeuvre). The critical objects and explanation stay `has_labels = False` (their labelling reads the
road users' precomputed futures). A fork whose expert future collides, leaves the road or the trajectory range is
dropped and counted.
Training reads these through `data: {source: dagger, ...}` (`training/sources.py`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np
from tqdm import tqdm

from ddrive_ros.plan import Plan
from ddrive_ros.sample import LABEL_SCHEMA, Sample, future_in_range, label_sections, label_waypoint_times
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
from ddrive_ros.sim.drivers import ModelDriver
from ddrive_ros.sim.fork_score import expert_ahead
from ddrive_ros.sim.labels import meta_behavior
from ddrive_ros.sim.safety_context import TrackedBoxes
from ddrive_ros.sim.sample import command_episode_seeds
from ddrive_ros.sim.world import SIM_DT
from ddrive_ros.timeline import FUTURE_HORIZON_S, OUTPUT_TIMES
from ddrive_ros.trajectory import world_to_ego

log = logging.getLogger(__name__)

# the driven part stops early enough that every plan's fork has the label horizon
EPISODE_S = 8.0 + FUTURE_HORIZON_S


@dataclass
class Drops:
    collided: int = 0  # the expert's future from the visited state ends in a collision or off the road
    out_of_range: int = 0  # the future leaves the trajectory quantisation range


class LabellingDriver(ModelDriver):
    """The learned planner, plus the expert's label of every observation it plans on."""

    def __init__(self, *args, driven_until_s: float, label_meta: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.driven_until_s = driven_until_s
        self.label_meta = label_meta
        self.samples: list[Sample] = []
        self.drops = Drops()

    def plan(self, t: float):
        plan, compute_s = super().plan(t)
        if t <= self.driven_until_s + 1e-9:
            self._label(t)
        return plan, compute_s

    def _label(self, t: float) -> None:
        w = self.world
        k = w.k
        horizon = k + int(round(FUTURE_HORIZON_S / SIM_DT))
        if horizon >= w.n_steps:
            return
        f = expert_ahead(w, FUTURE_HORIZON_S)
        if f.k < horizon:
            self.drops.collided += 1
            return
        steps = k + np.round(OUTPUT_TIMES / SIM_DT).astype(int)
        future = world_to_ego(f.ego_xy[steps], f.ego_xy[k], float(f.ego_yaw[k]))
        if not future_in_range(future):
            self.drops.out_of_range += 1
            return
        times = label_waypoint_times()
        keep = np.searchsorted(OUTPUT_TIMES, times - 1e-9)
        meta = meta_behavior(f, k) if self.label_meta else None
        labels = Plan(schema=LABEL_SCHEMA, waypoints=future[keep].copy(), waypoint_times=times, meta=meta, stamp=t)
        has = dict.fromkeys(label_sections(), False)
        has["trajectory"] = True
        has["future_meta_behavior"] = self.label_meta
        self.samples.append(Sample(observation=self.observation(t), future_xy=future, future_times=OUTPUT_TIMES.copy(),
                                   labels=labels, has_labels=has, episode_seed=-1, t0=t, source="dagger"))


def collect_episodes(planner, ep_seeds: list[int], plan_hz: float = 5.0, latency_ms: float = 200.0,
                     progress: bool = True, label_meta: bool = False) -> tuple[list[Sample], Drops]:
    """The labelled samples and drops of `planner` driving the given episode seeds, in their order. Each
    episode starts from `restart_sampling()`, so an episode's samples do not depend on what ran before it.
    A planner with safety reflection on (`options.reflect` safety or both) gets the road users as the node gets them
    (`sim/safety_context.TrackedBoxes`): its repairs take the ego to states the expert never drives into (braked for
    a road user and slow), which the expert then labels with its way back. `label_meta`: the meta behaviour is
    labelled too."""
    tracked_boxes = getattr(getattr(planner, "options", None), "reflect", "off") in ("safety", "both")
    opts = LoopOptions(duration_s=EPISODE_S, plan_hz=plan_hz, latency_ms=latency_ms)
    driven_until = EPISODE_S - FUTURE_HORIZON_S
    samples: list[Sample] = []
    drops = Drops()
    for ep_seed in tqdm(ep_seeds, desc="dagger episodes", unit="ep", disable=not progress):
        driver = LabellingDriver(planner, planner.restart_sampling, TrackedBoxes() if tracked_boxes else None,
                                 driven_until_s=driven_until, label_meta=label_meta)

        def factory(world: ClosedLoopWorld, d: LabellingDriver = driver) -> LabellingDriver:
            return d.bind(world)

        run_episode(int(ep_seed), "dagger", factory, opts)
        samples += driver.samples
        drops.collided += driver.drops.collided
        drops.out_of_range += driver.drops.out_of_range
    return samples, drops


def _finish(samples: list[Sample], drops: Drops, episodes: int, seed: int, name: str) -> list[Sample]:
    log.info("dagger: %d samples from %d episodes of %s; dropped %d (expert future collides or leaves the road) "
             "and %d (future out of the trajectory range)", len(samples), episodes, name, drops.collided,
             drops.out_of_range)
    if not samples:
        raise ValueError(f"dagger collection from {name} gave no samples ({episodes} episodes, seed {seed})")
    return samples


def dagger_episode_seeds(seed: int, episodes: int, commands: tuple[str, ...] | None = None) -> list[int]:
    """The episode seeds a collection drives: `episodes` seeds from `seed`, with `commands` only those whose
    navigation command is one of them (`sim/sample.command_episode_seeds`, at the DAgger episode length)."""
    return command_episode_seeds(seed, episodes, commands, EPISODE_S)


def collect(planner, seed: int, episodes: int, plan_hz: float = 5.0, latency_ms: float = 200.0,
            name: str = "planner", progress: bool = True, commands: tuple[str, ...] | None = None,
            label_meta: bool = False) -> list[Sample]:
    """Expert-labelled samples of the states `planner` (anything with `plan(Observation)` and
    `restart_sampling()`, e.g. a `Planner`) visits in `episodes` closed-loop episodes (episode seeds
    from `seed`; use seeds no evaluation uses; with `commands`, only the episodes of those navigation
    commands among them; with `label_meta`, the meta behaviour labelled too). `name` is for the log."""
    seeds = dagger_episode_seeds(seed, episodes, commands)
    samples, drops = collect_episodes(planner, seeds, plan_hz, latency_ms, progress, label_meta)
    return _finish(samples, drops, len(seeds), seed, name)


# ---------------------------------------------------------------------------------------------- processes
_WORKER_PLANNER = None


def _init_worker(make_planner: Callable[..., object], make_args: tuple) -> None:
    global _WORKER_PLANNER
    _WORKER_PLANNER = make_planner(*make_args)


def _worker_episode(ep_seed: int, plan_hz: float, latency_ms: float, label_meta: bool) -> tuple[list[Sample], Drops]:
    return collect_episodes(_WORKER_PLANNER, [ep_seed], plan_hz, latency_ms, progress=False, label_meta=label_meta)


def collect_in_processes(make_planner: Callable[..., object], make_args: tuple, seed: int, episodes: int,
                         workers: int, plan_hz: float = 5.0, latency_ms: float = 200.0, name: str = "planner",
                         progress: bool = True, commands: tuple[str, ...] | None = None,
                         label_meta: bool = False) -> list[Sample]:
    """`collect` with the episodes spread over `workers` processes, each building its planner once as
    `make_planner(*make_args)` (a module-level function, so a spawned process can import it: the layer
    that knows checkpoints passes it in). The samples are those of the one-process `collect`, in the same
    order: every episode is independent of the others."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if int(workers) < 1:
        raise ValueError(f"dagger workers must be at least 1, got {workers!r}")
    seeds = dagger_episode_seeds(seed, episodes, commands)
    results: dict[int, tuple[list[Sample], Drops]] = {}
    with ProcessPoolExecutor(max_workers=int(workers), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_init_worker, initargs=(make_planner, tuple(make_args))) as pool:
        futures = {pool.submit(_worker_episode, s, plan_hz, latency_ms, label_meta): i for i, s in enumerate(seeds)}
        for fut in tqdm(as_completed(futures), total=len(futures), desc=f"dagger episodes ({workers} processes)",
                        unit="ep", disable=not progress):
            results[futures[fut]] = fut.result()
    samples: list[Sample] = []
    drops = Drops()
    for i in range(len(seeds)):
        part, d = results[i]
        samples += part
        drops.collided += d.collided
        drops.out_of_range += d.out_of_range
    return _finish(samples, drops, len(seeds), seed, name)
