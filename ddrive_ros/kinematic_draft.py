"""A cold plan's trajectory draft from the ego state alone: constant acceleration along the current arc.

Speculative decoding verifies any draft with the model's own causal forward, so a draft changes what a
plan costs, never what it says (greedy output equals AR). A stream's plans draft from the previous plan
carried forward (previous_plan.py); the first plan of a stream, a plan after a gap, and every open-loop
evaluation sample have none. For those the ego state is a draft that costs nothing: the measured speed
and acceleration held along the arc of the measured yaw rate (speed never below zero). On the shipped
trajectory_only model it takes the cold plan from 8.4 to 7.7 forwards (AR: 17) and saves the diffusion
draft forward, which it replaces (docs/speed.md, "tree verification and the kinematic draft").

Only the trajectory is drafted: the other sections' positions stay masks, so their blocks draft as usual.
"""
from __future__ import annotations

import numpy as np

from ddrive_ros.observation import Observation
from ddrive_ros.scaffold.codec import Codec


def kinematic_waypoints(speed: float, accel: float, yaw_rate: float, times: np.ndarray) -> np.ndarray:
    """Ego-frame (K, 2) positions at `times`: distance s(t) = v t + a t^2 / 2 (held once the speed
    reaches zero) along the circular arc of curvature yaw_rate / speed (a line when either is zero)."""
    t = np.asarray(times, dtype=float).reshape(-1)
    v, a = float(speed), float(accel)
    t_stop = v / -a if a < 0 and v > 0 else np.inf
    tc = np.minimum(t, t_stop)
    s = np.maximum(v * tc + 0.5 * a * tc ** 2, 0.0)
    kappa = float(yaw_rate) / v if v > 0.1 else 0.0
    theta = kappa * s
    x = s * np.sinc(theta / np.pi)  # sin(theta) / kappa, without a division at kappa = 0
    y = s * 0.5 * theta * np.sinc(theta / (2.0 * np.pi)) ** 2  # (1 - cos(theta)) / kappa
    return np.column_stack([x, y])


def kinematic_ids(codec: Codec, obs: Observation) -> np.ndarray:
    """Output ids (L,): the template with the trajectory spelled from `obs`'s ego state; every other
    editable position masked (no draft for it)."""
    wf = codec.layout.schema.waypoint_field()
    times = wf.dt * np.arange(1, wf.count + 1)
    out = codec.layout.template_ids.copy()
    codec.spell_waypoints(kinematic_waypoints(obs.speed, obs.accel, obs.yaw_rate, times), out)
    return out
