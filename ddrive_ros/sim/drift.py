"""Drift-and-recover episodes: states a planner drives itself into, with the expert's way back.

Imitation learns from the expert, who is always on its route; a planner in closed loop drifts off it and
then sees states it never trained on (the right lane changes of issue 12 leave the road that way). Here
the expert itself drifts for a while: its pure pursuit aims `offset_m` beside the route (ramped in over
`ramp_s`, from `start_s` to `end_s`), then aims at the route again and recovers. Samples anchored at or
after `end_s` see the drift in their past (cameras, odometry) and the recovery as their future: the
labels are always the expert's own driving, never the drift.

    drift = sample_drift(rng)                  # or Drift(start_s=1.0, end_s=2.5, offset_m=-1.0)
    episode = Episode(seed, 12.0, drift=drift)
    anchors = [i for i in valid_anchor_frames(episode) if episode.frames[i].t >= drift.end_s]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Drift:
    start_s: float
    end_s: float
    offset_m: float  # left positive
    ramp_s: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.start_s < self.end_s) or self.ramp_s <= 0.0:
            raise ValueError(f"drift needs 0 <= start_s < end_s and ramp_s > 0, got {self}")

    def offset_at(self, t: float) -> float:
        """The pursued point's lateral offset at episode time t (0 outside the drift)."""
        if t < self.start_s or t >= self.end_s:
            return 0.0
        return self.offset_m * min(1.0, (t - self.start_s) / self.ramp_s)


@dataclass(frozen=True)
class DriftSpec:
    """How drifts are drawn for a data source (`drift:` in a `source: world` entry)."""

    # the pursued point's offset; the car itself gets about half of it off the route (1 m for 2 m over 2 s)
    # before it turns back: within a lane, so the recovery is never labelled a lane change
    min_offset_m: float = 0.8
    max_offset_m: float = 2.0
    start_s: tuple[float, float] = (0.5, 3.0)  # uniform start time
    duration_s: tuple[float, float] = (1.5, 3.0)  # uniform drift length (the ramp is 1 s)

    @classmethod
    def from_dict(cls, d: dict | None) -> "DriftSpec":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown drift keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        for key in ("start_s", "duration_s"):
            if key in d:
                d[key] = tuple(float(x) for x in d[key])
                if len(d[key]) != 2 or d[key][0] > d[key][1]:
                    raise ValueError(f"drift.{key} must be [lo, hi] with lo <= hi, got {d[key]}")
        spec = cls(**d)
        if not 0.0 < spec.min_offset_m <= spec.max_offset_m:
            raise ValueError(f"drift: need 0 < min_offset_m <= max_offset_m, got {spec}")
        return spec


def episode_drift(episode_seed: int, spec: DriftSpec = DriftSpec()) -> Drift:
    """The drift of a drifting episode, drawn from the episode's own seed (the same every run)."""
    return sample_drift(np.random.default_rng([int(episode_seed), 0xD1F7]), spec)


def sample_drift(rng: np.random.Generator, spec: DriftSpec = DriftSpec()) -> Drift:
    start = float(rng.uniform(*spec.start_s))
    end = start + float(rng.uniform(*spec.duration_s))
    size = float(rng.uniform(spec.min_offset_m, spec.max_offset_m))
    return Drift(start, end, size if rng.random() < 0.5 else -size)
