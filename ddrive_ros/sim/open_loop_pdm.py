"""NAVSIM's own protocol for `ddrive eval`: one plan, tracked for 4 s by the controller, with every
other road user on its recorded future (non-reactive), scored with the closed loop's sub-scores.

    row.update(pdm_summary(preds, times, samples))    # pdms, nc, dac, ep, ttc, comfort (means)

A world sample names its episode (seed) and anchor time, so the episode is simulated again (once
per seed, cached) for what the sample does not carry: the map, the route, the ego pose in the
world, the lights and the other agents at 20 Hz. EP is relative to the expert's own progress over
the same 4 s. The tracked start state is the observation's: position, heading, speed, and the
steering angle that gives the measured yaw rate. This is the number comparable in kind to
published NAVSIM PDMS; the reactive closed loop (`ddrive sim`) is the stricter one.
"""
from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np

from ddrive_ros.sample import Sample
from ddrive_ros.sim.controller import MAX_STEER, TrackingController, VehicleState, WorldPlan
from ddrive_ros.sim.scenario import EGO_WHEELBASE
from ddrive_ros.sim.scorer import EgoTrace, EpisodeScore, score_episode
from ddrive_ros.sim.world import SIM_DT, Episode
from ddrive_ros.trajectory import world_to_ego

log = logging.getLogger(__name__)

HORIZON_S = 4.0  # NAVSIM's simulation horizon
EPISODE_DURATION_S = 12.0  # the evaluator's world samples come from 12 s episodes (samples_from_world's default)
PARTS = ("pdms", "nc", "dac", "ep", "ttc", "comfort")


@lru_cache(maxsize=512)
def _episode(seed: int, duration_s: float) -> Episode:
    return Episode(seed, duration_s)


def source_episode(sample: Sample, duration_s: float = EPISODE_DURATION_S) -> Episode | None:
    """The episode a world sample came from, simulated again, or None when the sample is not a world
    sample or the re-simulated episode does not give its future (another duration, a hand-built scene):
    an episode's scenario depends on its duration (walkers, braking events), so check before scoring."""
    if sample.source != "world" or sample.episode_seed < 0:
        return None
    ep = _episode(int(sample.episode_seed), float(duration_s))
    k0 = int(round(sample.t0 / SIM_DT))
    steps = k0 + np.round(np.asarray(sample.future_times) / SIM_DT).astype(int)
    if k0 + int(round(HORIZON_S / SIM_DT)) >= ep.n_steps or steps[-1] >= ep.n_steps:
        return None
    pose_xy, yaw = ep.ego_xy[k0], float(ep.ego_yaw[k0])
    if not np.allclose(world_to_ego(ep.ego_xy[steps], pose_xy, yaw), sample.future_xy, atol=1e-6):
        return None
    return ep


def open_loop_pdm(plan_xy: np.ndarray, times: np.ndarray, sample: Sample,
                  duration_s: float = EPISODE_DURATION_S) -> EpisodeScore:
    """Track one plan ((K, 2) ego-frame positions at `times` after the sample's t0) for HORIZON_S."""
    ep = source_episode(sample, duration_s)
    if ep is None:
        raise ValueError(f"open-loop PDM needs the world episode of the sample (source={sample.source!r}, episode "
                         f"{sample.episode_seed}, t0={sample.t0}): not a world sample, or re-simulating it for "
                         f"{duration_s} s does not give its future (pass the duration its samples were made with)")
    k0 = int(round(sample.t0 / SIM_DT))
    n = int(round(HORIZON_S / SIM_DT))
    pose = (float(ep.ego_xy[k0, 0]), float(ep.ego_xy[k0, 1]), float(ep.ego_yaw[k0]))
    v0 = float(sample.observation.speed)
    traj = np.column_stack([np.asarray(times, float), np.asarray(plan_xy, float)[:, :2]])
    plan = WorldPlan.from_ego_trajectory(traj, 0.0, pose, v0)
    steer = float(np.arctan(sample.observation.yaw_rate * EGO_WHEELBASE / v0)) if v0 > 0.5 else 0.0
    state = VehicleState(*pose, v0, float(np.clip(steer, -MAX_STEER, MAX_STEER)))
    ctrl = TrackingController()
    xy, yaw, v = np.zeros((n + 1, 2)), np.zeros(n + 1), np.zeros(n + 1)
    for i in range(n + 1):
        xy[i], yaw[i], v[i] = (state.x, state.y), state.yaw, state.v
        if i < n:
            state.step(*ctrl.command(state, plan, i * SIM_DT), SIM_DT)
    route = ep.scenario.ego.route.path
    s0 = float(ep.ego_s[k0])
    s, d = route.project(xy, s0 - 5.0, s0 + 5.0 + 40.0 * HORIZON_S)
    ks = slice(k0, k0 + n + 1)
    inter = ep.scenario.road_map.intersection
    has_light = inter is not None and inter.light is not None
    trace = EgoTrace(
        dt=SIM_DT, ego_xy=xy, ego_yaw=yaw, ego_v=v, route_s=s, route_d=d, agent_xy=ep.agent_xy[:, ks],
        agent_yaw=ep.agent_yaw[:, ks], agent_v=ep.agent_v[:, ks], agent_half=ep.agent_size[:, :2] / 2.0,
        agent_kind=tuple(str(k) for k in ep.agent_kind), road_map=ep.scenario.road_map,
        light_main=np.array([ep.light_state(k) for k in range(k0, k0 + n + 1)], dtype=object) if has_light else None,
        stop_line_s=ep.scenario.marks.get("stop_line"), stop_sign=inter is not None and inter.control == "stop_sign")
    return score_episode(trace, float(ep.ego_s[k0 + n] - ep.ego_s[k0]))


def pdm_summary(preds: list[np.ndarray], times: np.ndarray, samples: list[Sample]) -> dict[str, float]:
    """Means of PDMS and its parts over samples (an eval row's `pdms`, `nc`, `dac`, `ep`, `ttc`,
    `comfort`). Samples without a reproducible world episode are left out, and their count is logged."""
    scores = [open_loop_pdm(p, times, s) for p, s in zip(preds, samples) if source_episode(s) is not None]
    skipped = len(samples) - len(scores)
    if skipped:
        log.warning("open-loop PDM: %d of %d samples have no reproducible world episode (bag samples, hand-built "
                    "scenes, other durations): left out of pdms", skipped, len(samples))
    if not scores:
        return {}
    return {k: float(np.mean([getattr(sc, k) for sc in scores])) for k in PARTS}
