"""The previous plan carried forward to a new observation, as token ids: a draft for speculative decoding.

A planner that runs on a stream sees nearly the same scene every 100-200 ms, and its last plan is a
good guess at the next one: the critical objects, the explanation and the meta behaviour usually
repeat word for word, and the trajectory is the same path seen from a little further along it.
Scaffold speculative decoding verifies any draft with the model's own causal forward, so a draft
from outside the model changes what a plan costs, never what it says (greedy output equals AR,
sampled output keeps the AR distribution); a block whose carried-forward draft is accepted whole
costs one forward instead of two or more.

Carrying forward: the text sections are copied; the trajectory is re-expressed in the new ego
frame, taking the pose the previous plan predicted for the new stamp (dt = new stamp - old stamp)
as where the vehicle now is, and sampling the previous waypoints (the decoded tokens' values, from
the origin at t = 0, linearly; past the horizon on at the last velocity) at each waypoint time + dt.
Positions come from the waypoints rather than the JMT curve through them because the next plan's
tokens are the model's waypoints again: a constant-speed plan carries forward to itself digit for
digit, where the curve's start (fitted to the measured speed and acceleration) moves every digit a
little. The heading at dt comes from the JMT curve (smooth where straight waypoint segments are
not). Then the codec spells it in the schema's tokens. Nothing is carried over a gap longer than `max_gap_s`
or backwards in time (a new episode, a replay restart).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ddrive_ros.plan import Plan
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.trajectory import world_to_ego

MAX_GAP_S = 1.0  # beyond this the scene has moved on too far for the old plan to be a useful draft


def carried_forward(plan: Plan, stamp: float, max_gap_s: float = MAX_GAP_S) -> Plan | None:
    """`plan` (made at plan.stamp) as a guess at the plan for `stamp`; None when there is no useful one."""
    dt = float(stamp) - float(plan.stamp)
    if not 0.0 < dt <= max_gap_s or plan.trajectory is None:
        return None
    traj = np.asarray(plan.trajectory, dtype=float)
    yaw0 = float(np.interp(dt, np.concatenate([[0.0], traj[:, 0]]), np.unwrap(np.concatenate([[0.0], traj[:, 3]]))))
    t = np.concatenate([[0.0], np.asarray(plan.waypoint_times, dtype=float)])
    xy = np.vstack([[0.0, 0.0], np.asarray(plan.waypoints, dtype=float)])
    x0, y0 = np.interp(dt, t, xy[:, 0]), np.interp(dt, t, xy[:, 1])
    query = np.asarray(plan.waypoint_times, dtype=float) + dt
    pts = np.stack([np.interp(query, t, xy[:, 0]), np.interp(query, t, xy[:, 1])], axis=1)
    beyond = query > t[-1]
    if np.any(beyond):
        velocity = (xy[-1] - xy[-2]) / max(t[-1] - t[-2], 1e-6)
        pts[beyond] = xy[-1] + (query[beyond] - t[-1])[:, None] * velocity
    # the old plan's ego frame plays the world; the pose it predicted for `stamp` is the new ego frame
    ego = world_to_ego(pts, (x0, y0), yaw0)
    return replace(plan, waypoints=ego, stamp=float(stamp), trajectory=None, rollouts=[], stats=None)


def prior_ids(codec: Codec, plan: Plan, ids: np.ndarray, stamp: float, max_gap_s: float = MAX_GAP_S) -> np.ndarray | None:
    """The previous plan carried forward to `stamp` as output ids: its own ids `ids` (L,) for the text
    sections (already tokens: nothing to spell again), the carried-forward waypoints spelled anew."""
    guess = carried_forward(plan, stamp, max_gap_s)
    if guess is None:
        return None
    out = np.array(ids, dtype=np.int64).reshape(-1)
    if out.shape[0] != codec.layout.length:
        raise ValueError(f"previous plan has {out.shape[0]} ids, the layout {codec.layout.length}")
    codec.spell_waypoints(guess.waypoints, out)
    return out
