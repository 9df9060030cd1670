"""Training samples: an `Observation`, the expert's future as ground truth, and the plan labels.

The same `Sample` comes from two sources: straight from the simulation (`samples_from_world`, fast)
or from a rosbag (`bag_reader.extract_samples`, which sees only what a real bag holds).

Timing of one sample at anchor time t0 (seconds in the episode):
  images   at t0 - frame_spacing_s and t0 (three cameras each)
  past_xy  ego positions at t0 - 2.0, -1.5, -1.0, -0.5 s in the ego frame at t0
  accel    (v(t0) - v(t0 - 0.2 s)) / 0.2 s: a backward difference, as a node on the car can compute it
  future   20 ego positions at t0 + 0.25 .. 5.0 s in the ego frame at t0
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
from tqdm import tqdm

from ddrive_ros.data.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH
from ddrive_ros.data.labels import critical_objects, explanation, meta_behavior
from ddrive_ros.data.render import Renderer
from ddrive_ros.data.scenario import EGO_CENTER_OFFSET, EGO_LENGTH, EGO_WIDTH
from ddrive_ros.data.world import FRAME_DT, Episode
from ddrive_ros.observation import PAST_STEPS, Observation
from ddrive_ros.plan import Plan
from ddrive_ros.trajectory import wrap_angle, world_to_ego

logger = logging.getLogger(__name__)

FUTURE_TIMES = np.round(np.arange(1, 21) * 0.25, 6)  # 0.25 .. 5.0 s
WAYPOINT_TIMES = np.round(np.arange(1, 11) * 0.5, 6)  # 0.5 .. 5.0 s, the label plan's waypoints
PAST_TIMES = np.array([-2.0, -1.5, -1.0, -0.5])
ACCEL_WINDOW_S = 0.2
PAST_HORIZON_S = 2.0
FUTURE_HORIZON_S = 5.0
SECTIONS = ("critical_objects", "explanation", "future_meta_behavior", "trajectory")
SCHEMA = "fast_ddrive"
# box of the ego about base_link, for collision checks against objects_future
EGO_HALF_EXTENTS = np.array([EGO_LENGTH / 2, EGO_WIDTH / 2])
EGO_BOX_OFFSET = EGO_CENTER_OFFSET
# ranges of the trajectory section ("dd.d" x, "sdd.d" y); the world keeps its futures well inside
FUTURE_X_RANGE = (-0.5, 99.9)
FUTURE_Y_LIMIT = 20.0


@dataclass
class Sample:
    """One training example. `observation.stamp` is the episode time t0 for world samples and the
    ROS time (s) of the anchor frame for bag samples; `t0` is always seconds since the episode start.
    Bag samples carry no `objects_*` (a bag has no ground-truth tracks of other agents)."""

    observation: Observation
    future_xy: np.ndarray  # (20, 2) ego frame at t0, at future_times
    future_times: np.ndarray  # (20,) s after t0
    labels: Plan  # schema fast_ddrive; sections absent from the source are left empty (see has_labels)
    has_labels: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(SECTIONS, True))
    future_yaw: np.ndarray = field(default_factory=lambda: np.zeros(20))  # ego-frame heading at future_times
    future_speed: np.ndarray = field(default_factory=lambda: np.zeros(20))
    objects_future: np.ndarray = field(default_factory=lambda: np.zeros((0, 20, 2)))  # (A, 20, 2) box centres
    objects_yaw: np.ndarray = field(default_factory=lambda: np.zeros((0, 20)))  # (A, 20) ego-frame heading
    objects_half_extents: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (A, 2) half length, width
    objects_kind: tuple[str, ...] = ()
    episode_seed: int = -1  # -1: unknown (a bag without episode markers)
    t0: float = 0.0  # s since the episode start
    source: str = "world"


def future_in_range(future_xy: np.ndarray) -> bool:
    x, y = future_xy[:, 0], future_xy[:, 1]
    return bool(np.all(np.isfinite(future_xy)) and x.min() >= FUTURE_X_RANGE[0] and x.max() <= FUTURE_X_RANGE[1]
                and np.abs(y).max() <= FUTURE_Y_LIMIT)


def episode_seeds(seed: int, n_episodes: int) -> list[int]:
    """Independent per-episode seeds derived from one seed (stable across numpy versions)."""
    return [int(s) for s in np.random.SeedSequence(int(seed)).generate_state(int(n_episodes), dtype=np.uint32)]


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


def make_sample(episode: Episode, t0_index: int, renderer: Renderer | None = None,
                frame_spacing_s: float = 0.5) -> Sample:
    """The sample anchored at camera frame `t0_index` of an episode."""
    renderer = renderer or default_renderer()
    frame = episode.frames[t0_index]
    k = frame.step
    dt = episode.dt
    n_past = int(round(PAST_HORIZON_S / dt))
    n_future = int(round(FUTURE_HORIZON_S / dt))
    if k - n_past < 0 or k + n_future >= episode.n_steps:
        raise ValueError(f"frame {t0_index} (t={frame.t:.2f} s) lacks 2 s of past or 5 s of future")
    prev_index = t0_index - int(round(frame_spacing_s / FRAME_DT))
    images = np.stack([episode.rendered(prev_index, renderer), episode.rendered(t0_index, renderer)])
    ego_xy, ego_yaw = episode.ego_xy[k], float(episode.ego_yaw[k])
    past_steps = k + np.round(PAST_TIMES / dt).astype(int)
    fut_steps = k + np.round(FUTURE_TIMES / dt).astype(int)
    k_acc = k - int(round(ACCEL_WINDOW_S / dt))
    obs = Observation(
        images=images,
        speed=float(episode.ego_v[k]),
        accel=float((episode.ego_v[k] - episode.ego_v[k_acc]) / ACCEL_WINDOW_S),
        yaw_rate=float(episode.ego_yaw_rate[k]),
        past_xy=world_to_ego(episode.ego_xy[past_steps], ego_xy, ego_yaw),
        nav_command=str(episode.nav_command[k]),
        stamp=float(frame.t),
        meta={"episode_seed": episode.seed, "t0": float(frame.t)},
    )
    assert obs.past_xy.shape == (PAST_STEPS, 2)
    future_xy = world_to_ego(episode.ego_xy[fut_steps], ego_xy, ego_yaw)
    objects = critical_objects(episode, k)
    meta = meta_behavior(episode, k)
    plan = Plan(schema=SCHEMA, waypoints=future_xy[1::2].copy(), waypoint_times=WAYPOINT_TIMES.copy(),
                critical_objects=objects, explanation=explanation(episode, k, meta, objects), meta=meta,
                stamp=float(frame.t))
    if episode.n_agents:
        obj_xy = world_to_ego(episode.agent_xy[:, fut_steps], ego_xy, ego_yaw)
        obj_yaw = wrap_angle(episode.agent_yaw[:, fut_steps] - ego_yaw)
    else:
        obj_xy, obj_yaw = np.zeros((0, len(fut_steps), 2)), np.zeros((0, len(fut_steps)))
    return Sample(
        observation=obs,
        future_xy=future_xy,
        future_times=FUTURE_TIMES.copy(),
        labels=plan,
        has_labels=dict.fromkeys(SECTIONS, True),
        future_yaw=np.asarray(wrap_angle(episode.ego_yaw[fut_steps] - ego_yaw)),
        future_speed=episode.ego_v[fut_steps].copy(),
        objects_future=obj_xy,
        objects_yaw=np.asarray(obj_yaw).reshape(len(obj_xy), -1),
        objects_half_extents=episode.agent_size[:, :2] / 2.0,
        objects_kind=tuple(str(x) for x in episode.agent_kind),
        episode_seed=episode.seed,
        t0=float(frame.t),
    )


def iter_samples(seed: int, n_episodes: int, *, duration_s: float = 12.0, stride_s: float = 0.5,
                 frame_spacing_s: float = 0.5, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                 progress: bool = False) -> Iterator[Sample]:
    """Samples of `n_episodes` episodes (seeds from `episode_seeds(seed, n)`), every `stride_s` seconds."""
    renderer = default_renderer(width, height)
    skipped = 0
    for ep_seed in tqdm(episode_seeds(seed, n_episodes), desc="episodes", unit="ep", disable=not progress):
        episode = Episode(ep_seed, duration_s)
        for index in valid_anchor_frames(episode, stride_s):
            sample = make_sample(episode, index, renderer, frame_spacing_s)
            if not future_in_range(sample.future_xy):
                skipped += 1
                continue
            yield sample
        episode.clear_cache()
    if skipped:
        logger.info("skipped %d samples whose future left the trajectory range", skipped)


def samples_from_world(seed: int, n_episodes: int, *, duration_s: float = 12.0, stride_s: float = 0.5,
                       frame_spacing_s: float = 0.5, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                       progress: bool = True) -> Iterator[Sample]:
    """Training samples straight from the simulation: the same episodes and anchors that
    `write_bag((seed, n_episodes))` + `extract_samples` give, without the bag round trip."""
    yield from iter_samples(seed, n_episodes, duration_s=duration_s, stride_s=stride_s,
                            frame_spacing_s=frame_spacing_s, width=width, height=height, progress=progress)
