"""World samples: `Sample`s straight from simulated episodes (the fast path; a bag of the same
episodes gives the same observations through `ddrive_ros.bags.reader`, see the equivalence test).

Timing of one sample at anchor time t0 (seconds in the episode), all from `ddrive_ros.timeline`:
images at t0 - FRAME_HISTORY_S and t0 (three cameras each); the ego fields by the shared
observation recipe; the future at OUTPUT_TIMES after t0 in the ego frame at t0.
"""
from __future__ import annotations

import logging
from typing import Iterator

import numpy as np
from tqdm import tqdm

from ddrive_ros.observation import NAV_COMMANDS
from ddrive_ros.observation_recipe import EgoTrack, assemble
from ddrive_ros.plan import Plan
from ddrive_ros.sample import LABEL_SCHEMA, Sample, future_in_range, label_sections, label_waypoint_times
from ddrive_ros.sim.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH
from ddrive_ros.sim.drift import DriftSpec, episode_drift
from ddrive_ros.sim.labels import critical_objects, explanation, meta_behavior
from ddrive_ros.sim.render import Renderer
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_LENGTH, EGO_WIDTH, sample_scenario
from ddrive_ros.sim.world import FRAME_DT, Episode
from ddrive_ros.timeline import FRAME_HISTORY_S, FUTURE_HORIZON_S, OUTPUT_TIMES, PAST_HORIZON_S
from ddrive_ros.trajectory import wrap_angle, world_to_ego

logger = logging.getLogger(__name__)

# box of the ego about base_link, for collision checks against objects_future
EGO_HALF_EXTENTS = np.array([EGO_LENGTH / 2, EGO_WIDTH / 2])
EGO_BOX_OFFSET = EGO_CENTER_OFFSET


def episode_seeds(seed: int, n_episodes: int) -> list[int]:
    """Independent per-episode seeds derived from one seed (stable across numpy versions)."""
    return [int(s) for s in np.random.SeedSequence(int(seed)).generate_state(int(n_episodes), dtype=np.uint32)]


def command_episode_seeds(seed: int, n_episodes: int, commands: tuple[str, ...] | None,
                          duration_s: float) -> list[int]:
    """`episode_seeds(seed, n_episodes)`, and with `commands` only those whose episode's navigation command (its
    scenario at `duration_s`) is one of them: the same episodes an unfiltered list gives, the rest dropped before
    they are simulated. The one filter of the training sources that take `commands` (world and DAgger)."""
    seeds = episode_seeds(seed, n_episodes)
    if commands is None:
        return seeds
    unknown = set(commands) - set(NAV_COMMANDS)
    if unknown or not commands:
        raise ValueError(f"commands {sorted(unknown) or list(commands)}: each must be one of {list(NAV_COMMANDS)}")
    return [s for s in seeds if sample_scenario(s, duration_s).nav_command in commands]


_RENDERERS: dict[tuple[int, int], Renderer] = {}


def default_renderer(width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> Renderer:
    key = (int(width), int(height))
    if key not in _RENDERERS:
        _RENDERERS[key] = Renderer(width=key[0], height=key[1])
    return _RENDERERS[key]


def valid_anchor_frames(episode: Episode, stride_s: float = 0.5) -> list[int]:
    """Frame indices usable as t0: 2 s of past and 5 s of future inside the episode, every stride_s."""
    stride = max(int(round(stride_s / FRAME_DT)), 1)
    first = int(round(PAST_HORIZON_S / FRAME_DT))
    last = int(np.floor((episode.duration_s - FUTURE_HORIZON_S) / FRAME_DT + 1e-9))
    return list(range(first, last + 1, stride))


def ego_track(episode: Episode) -> EgoTrack:
    """The episode's ego odometry as the observation recipe reads it (what /odom carries)."""
    return EgoTrack(episode.t, episode.ego_xy[:, 0], episode.ego_xy[:, 1], episode.ego_yaw, episode.ego_v,
                    episode.ego_yaw_rate)


def make_sample(episode: Episode, t0_index: int, renderer: Renderer | None = None,
                frame_spacing_s: float = FRAME_HISTORY_S, track: EgoTrack | None = None) -> Sample:
    """The sample anchored at camera frame `t0_index` of an episode."""
    renderer = renderer or default_renderer()
    frame = episode.frames[t0_index]
    k = frame.step
    dt = episode.dt
    n_past = int(round(PAST_HORIZON_S / dt))
    n_future = int(round(FUTURE_HORIZON_S / dt))
    if k - n_past < 0 or k + n_future >= episode.n_steps:
        raise ValueError(f"frame {t0_index} (t={frame.t:.2f} s) lacks {PAST_HORIZON_S} s of past or "
                         f"{FUTURE_HORIZON_S} s of future")
    prev_index = t0_index - int(round(frame_spacing_s / FRAME_DT))
    images = [episode.rendered(prev_index, renderer), episode.rendered(t0_index, renderer)]
    obs = assemble(images, track or ego_track(episode), float(episode.t[k]), str(episode.nav_command[k]),
                   stamp=float(frame.t), meta={"episode_seed": episode.seed, "t0": float(frame.t)})
    ego_xy, ego_yaw = episode.ego_xy[k], float(episode.ego_yaw[k])
    fut_steps = k + np.round(OUTPUT_TIMES / dt).astype(int)
    future_xy = world_to_ego(episode.ego_xy[fut_steps], ego_xy, ego_yaw)
    objects = critical_objects(episode, k)
    meta = meta_behavior(episode, k)
    waypoint_times = label_waypoint_times()
    waypoint_steps = np.searchsorted(OUTPUT_TIMES, waypoint_times - 1e-9)
    plan = Plan(schema=LABEL_SCHEMA, waypoints=future_xy[waypoint_steps].copy(), waypoint_times=waypoint_times,
                critical_objects=objects, explanation=explanation(episode, k, meta, objects), meta=meta,
                stamp=float(frame.t))
    n_agents = int(episode.n_agents)
    if n_agents:
        obj_xy = world_to_ego(episode.agent_xy[:, fut_steps], ego_xy, ego_yaw)
        obj_yaw = np.asarray(wrap_angle(episode.agent_yaw[:, fut_steps] - ego_yaw))
    else:  # a scene with no other road users
        obj_xy, obj_yaw = np.zeros((0, len(fut_steps), 2)), np.zeros((0, len(fut_steps)))
    return Sample(
        observation=obs,
        future_xy=future_xy,
        future_times=OUTPUT_TIMES.copy(),
        labels=plan,
        has_labels=dict.fromkeys(label_sections(), True),
        future_yaw=np.asarray(wrap_angle(episode.ego_yaw[fut_steps] - ego_yaw)),
        future_speed=episode.ego_v[fut_steps].copy(),
        objects_future=obj_xy,
        objects_yaw=obj_yaw.reshape(n_agents, len(fut_steps)),
        objects_half_extents=np.asarray(episode.agent_size, dtype=float).reshape(n_agents, 3)[:, :2] / 2.0,
        objects_kind=tuple(str(x) for x in episode.agent_kind),
        episode_seed=episode.seed,
        t0=float(frame.t),
    )


def iter_samples(seed: int, n_episodes: int, *, duration_s: float = 12.0, stride_s: float = 0.5,
                 frame_spacing_s: float = FRAME_HISTORY_S, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                 progress: bool = False, drift: DriftSpec | None = None,
                 commands: tuple[str, ...] | None = None) -> Iterator[Sample]:
    """Samples of `n_episodes` episodes (seeds from `episode_seeds(seed, n)`), every `stride_s` seconds.
    With `drift`, every episode is a drift-and-recover one (`sim/drift.py`, drawn from the episode's seed)
    and only anchors at or after its drift's end are kept. With `commands`, only the episodes whose
    navigation command is one of them are simulated (the others are drawn and dropped: the kept ones are
    the same episodes an unfiltered call gives)."""
    seeds = command_episode_seeds(seed, n_episodes, commands, duration_s)
    renderer = default_renderer(width, height)
    skipped = 0
    for ep_seed in tqdm(seeds, desc="episodes", unit="ep", disable=not progress):
        d = episode_drift(ep_seed, drift) if drift is not None else None
        episode = Episode(ep_seed, duration_s, drift=d)
        track = ego_track(episode)
        for index in valid_anchor_frames(episode, stride_s):
            if d is not None and episode.frames[index].t < d.end_s - 1e-9:
                continue
            sample = make_sample(episode, index, renderer, frame_spacing_s, track)
            if not future_in_range(sample.future_xy):
                skipped += 1
                continue
            yield sample
        episode.clear_cache()
    if skipped:
        logger.info("skipped %d samples whose future left the trajectory range", skipped)


def samples_from_world(seed: int, n_episodes: int, *, duration_s: float = 12.0, stride_s: float = 0.5,
                       frame_spacing_s: float = FRAME_HISTORY_S, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                       progress: bool = True, drift: DriftSpec | None = None,
                       commands: tuple[str, ...] | None = None) -> Iterator[Sample]:
    """Training samples straight from the simulation: the same episodes and anchors that
    `write_bag((seed, n_episodes))` + `extract_samples` give, without the bag round trip (drifting
    episodes have no bag)."""
    yield from iter_samples(seed, n_episodes, duration_s=duration_s, stride_s=stride_s,
                            frame_spacing_s=frame_spacing_s, width=width, height=height, progress=progress,
                            drift=drift, commands=commands)
