"""The structured plan: what the planner publishes, and what the codec maps to and from tokens."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class MetaBehavior:
    longitudinal: str = "KEEP"  # KEEP | ACCELERATE | DECELERATE | STOP
    lateral: str = "STRAIGHT"  # STRAIGHT | LEFT_TURN | RIGHT_TURN | LEFT_CHANGE | RIGHT_CHANGE
    target_speed: float = 0.0  # m/s at the end of the horizon
    turn_signal: str = "OFF"  # OFF | LEFT | RIGHT


@dataclass
class DecodeStats:
    """What one plan cost: counted, not guessed."""

    decoder: str = ""
    forwards: int = 0  # backbone forwards (prefill counts one)
    tokens_processed: int = 0  # positions run through the backbone, summed over forwards and batch rows
    tokens_decided: int = 0  # editable positions decided
    forwards_per_section: dict[str, int] = field(default_factory=dict)
    tree_forwards: int = 0  # forwards that verified candidate rows (decoding/tree.py)
    tree_rows: int = 0  # rows over those forwards
    prior_blocks: int = 0  # blocks whose first draft came from outside the model (the previous plan, the ego state)
    prior: str = ""  # where that draft came from: "previous" (plan), "kinematic" (ego state), "" (none)
    wall_ms: float = 0.0
    stage_ms: dict[str, float] = field(default_factory=dict)
    # reflection (AutoEdit / safety): mode, tokens rewritten, forwards, violations before and after
    reflect: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_forward(self) -> float:
        """Editable tokens decided per backbone forward after prefill."""
        decode_forwards = max(self.forwards - 1, 1)
        return self.tokens_decided / decode_forwards

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tokens_per_forward"] = self.tokens_per_forward
        return out


@dataclass
class Plan:
    """A decoded plan. Waypoints are in the ego frame at the observation time (x forward, y left)."""

    schema: str
    waypoints: np.ndarray  # (K, 2) x, y at `waypoint_times`
    waypoint_times: np.ndarray  # (K,) seconds from the observation
    critical_objects: dict[str, bool] = field(default_factory=dict)
    explanation: str | None = None  # None: not labelled / not in the schema
    meta: MetaBehavior | None = None
    # per-field validity: False where the tokens did not form a valid value (then a default is used)
    validity: dict[str, bool] = field(default_factory=dict)
    clipped: bool = False  # a coordinate was outside the quantisation range when encoding
    trajectory: np.ndarray | None = None  # (20, 5) t, x, y, yaw, v after JMT interpolation
    rollouts: list[np.ndarray] = field(default_factory=list)  # per-rollout (K, 2) waypoints
    stats: DecodeStats | None = None
    stamp: float = 0.0
    draft_waypoints: np.ndarray | None = None  # (K, 2) before reflection, when the planner reflected
    pulled_away: bool = False  # the trajectory was re-timed to pull away on the meta's ACCELERATE (start_on_meta)
    # start_on_meta would have pulled away, but the pull-away met a road user or left the corridor that the plan
    # as decoded did not (safety reflection's context): the plan was left as decoded
    pull_away_refused: bool = False

    @property
    def valid(self) -> bool:
        return all(self.validity.values()) if self.validity else True

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able structure (what the ROS node publishes)."""
        out: dict[str, Any] = {"schema": self.schema, "stamp": self.stamp, "valid": self.valid}
        if self.critical_objects:
            out["critical_objects"] = dict(self.critical_objects)
        if self.explanation is not None:
            out["explanation"] = self.explanation
        if self.meta is not None:
            out["future_meta_behavior"] = asdict(self.meta)
        out["waypoints"] = [
            {"t": float(t), "x": float(x), "y": float(y)} for t, (x, y) in zip(self.waypoint_times, self.waypoints)
        ]
        if self.trajectory is not None:
            out["trajectory"] = [dict(zip(("t", "x", "y", "yaw", "v"), map(float, row))) for row in self.trajectory]
        if self.draft_waypoints is not None:
            out["draft_waypoints"] = np.asarray(self.draft_waypoints, dtype=float).round(3).tolist()
        if self.rollouts:
            out["rollouts"] = [np.asarray(r).round(3).tolist() for r in self.rollouts]
        if self.pulled_away or self.pull_away_refused:  # start_on_meta re-timed the plan, or would have
            out["pull_away"] = "pulled" if self.pulled_away else "refused"
        out["validity"] = dict(self.validity)
        if self.stats is not None:
            out["stats"] = self.stats.to_dict()
        return out


def meta_text(meta: dict | None) -> str:
    """One line for a meta behaviour as it stands in the plan JSON (markers, pictures)."""
    if not meta:
        return "no meta behaviour"
    return f"{meta.get('longitudinal', '?')} / {meta.get('lateral', '?')} -> {float(meta.get('target_speed', 0)):.1f} m/s"
