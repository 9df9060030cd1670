"""Intelligent Driver Model (Treiber et al.): the longitudinal law of every driver in the world.

a = a_max * (1 - (v / v0)^delta - (s*(v, dv) / gap)^2),  s* = s0 + v T + v dv / (2 sqrt(a_max b))

Stop lines and crossing pedestrians enter as standing obstacles (lead speed 0), so one law covers
car following, stopping and starting.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class IdmParams:
    a_max: float = 1.5  # m/s^2, comfortable acceleration
    b_comf: float = 2.0  # m/s^2, comfortable deceleration
    headway_s: float = 1.2  # s, desired time gap
    s0: float = 2.0  # m, standstill gap to a vehicle
    s0_line: float = 1.0  # m, standstill gap to a stop line
    delta: float = 4.0
    a_min: float = -7.0  # m/s^2, hardest braking


def idm_free(v: ArrayLike, v0: ArrayLike, p: IdmParams) -> np.ndarray:
    """Free-road term; v0 <= 0 means 'stand still'."""
    v = np.asarray(v, dtype=float)
    v0 = np.maximum(np.asarray(v0, dtype=float), 0.1)
    return p.a_max * (1.0 - (v / v0) ** p.delta)


def idm_accel(v: ArrayLike, v0: ArrayLike, gap: ArrayLike, v_lead: ArrayLike, p: IdmParams,
              s0: ArrayLike | None = None) -> np.ndarray:
    """IDM acceleration behind an obstacle `gap` metres ahead moving at `v_lead` (inf gap: free road)."""
    v = np.asarray(v, dtype=float)
    gap = np.maximum(np.asarray(gap, dtype=float), 0.05)
    dv = v - np.asarray(v_lead, dtype=float)
    s0 = p.s0 if s0 is None else np.asarray(s0, dtype=float)
    s_star = s0 + np.maximum(0.0, v * p.headway_s + v * dv / (2.0 * np.sqrt(p.a_max * p.b_comf)))
    interaction = np.where(np.isfinite(gap), (s_star / gap) ** 2, 0.0)
    return np.clip(idm_free(v, v0, p) - p.a_max * interaction, p.a_min, p.a_max)


def can_stop(v: ArrayLike, gap: ArrayLike, max_decel: float) -> np.ndarray:
    """Whether a vehicle at speed v can stop within `gap` metres braking at most `max_decel`."""
    v = np.asarray(v, dtype=float)
    gap = np.asarray(gap, dtype=float)
    return (gap > 0.0) & (v * v <= 2.0 * max_decel * np.maximum(gap, 0.0) + 1e-9)
