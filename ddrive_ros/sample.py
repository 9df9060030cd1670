"""A training / evaluation sample: an `Observation`, the ego's true future and the plan labels.

It comes from two sources through one interface: the synthetic world (`ddrive_ros.sim.sample`)
and a user's rosbags (`ddrive_ros.bags.reader.extract_samples`); training and evaluation read
`Sample`s and never ask which. Both build the observation with the one recipe
(`ddrive_ros.observation_recipe`) on the grids of `ddrive_ros.timeline`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ddrive_ros.observation import Observation
from ddrive_ros.plan import Plan
from ddrive_ros.scaffold.schema import Schema
from ddrive_ros.timeline import OUTPUT_TIMES

LABEL_SCHEMA = "fast_ddrive"  # labels are written in the full structured plan's schema


@lru_cache(maxsize=1)
def label_schema() -> Schema:
    return Schema.load(LABEL_SCHEMA)


def label_sections() -> tuple[str, ...]:
    return label_schema().section_names


def label_waypoint_times() -> np.ndarray:
    """The label plan's waypoint stamps (the schema's waypoint count and spacing)."""
    wf = label_schema().waypoint_field()
    return np.round(np.arange(1, wf.count + 1) * wf.dt, 6)


def future_range() -> tuple[tuple[float, float], float]:
    """((x min, x max), |y| max) a future must stay in to be written in the label schema's digits
    (x 'dd.d' unsigned, y 'sdd.d'); x may dip 0.5 m below zero (a creeping reverse is clipped)."""
    wf = label_schema().waypoint_field()
    return (-0.5, wf.x.max_abs), wf.y.max_abs


def future_in_range(future_xy: np.ndarray) -> bool:
    (x_lo, x_hi), y_max = future_range()
    x, y = future_xy[:, 0], future_xy[:, 1]
    return bool(np.all(np.isfinite(future_xy)) and x.min() >= x_lo and x.max() <= x_hi and np.abs(y).max() <= y_max)


def _no_objects(*shape: int):
    return field(default_factory=lambda: np.zeros((0, *shape)))


@dataclass
class Sample:
    """One example. `observation.stamp` is the episode time t0 for world samples and the ROS time
    (s) of the anchor frame for bag samples; `t0` is always seconds since the episode start.
    Bag samples carry no `objects_*` (a bag has no ground-truth tracks of other agents)."""

    observation: Observation
    future_xy: np.ndarray  # (20, 2) ego frame at t0, at future_times
    labels: Plan  # label schema; sections absent from the source are left empty (see has_labels)
    future_times: np.ndarray = field(default_factory=lambda: OUTPUT_TIMES.copy())  # (20,) s after t0
    has_labels: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(label_sections(), True))
    future_yaw: np.ndarray = field(default_factory=lambda: np.zeros(len(OUTPUT_TIMES)))  # ego-frame heading
    future_speed: np.ndarray = field(default_factory=lambda: np.zeros(len(OUTPUT_TIMES)))
    objects_future: np.ndarray = _no_objects(len(OUTPUT_TIMES), 2)  # (A, 20, 2) box centres, ego frame
    objects_yaw: np.ndarray = _no_objects(len(OUTPUT_TIMES))  # (A, 20) ego-frame heading
    objects_half_extents: np.ndarray = _no_objects(2)  # (A, 2) half length, half width
    objects_kind: tuple[str, ...] = ()
    episode_seed: int = -1  # -1: unknown (a bag without episode markers)
    t0: float = 0.0  # s since the episode start
    source: str = "world"
