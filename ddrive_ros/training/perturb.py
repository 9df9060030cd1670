"""Structure-aware perturbations of expert trajectories, for training the model to repair its own
trajectory tokens (AutoEdit, after ReflectDrive-2).

Each perturbed sample gets one of (probabilities in `RepairSpec`):
- progress: the expert path is kept but travelled `scale` times as far at every waypoint time
  (scale ~ U(1 - progress, 1 + progress), |scale - 1| >= 0.05): too far / too short;
- heading: from waypoint k0 ~ U{0..K-2} on, the tail is rotated about waypoint k0 - 1 (the origin for
  k0 = 0) by +-U(heading_min_deg, heading_max_deg): drifting left / right;
- both, one after the other;
- none (identity): the model must also learn to keep a correct trajectory as it is.
The perturbed waypoints are re-tokenised with the schema's codec; the target is always the expert.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.training.config_keys import from_checked_dict


@dataclass(frozen=True)
class RepairSpec:
    progress: float = 0.3  # max relative change of progress
    heading_min_deg: float = 3.0
    heading_max_deg: float = 15.0
    p_progress: float = 0.35
    p_heading: float = 0.35
    p_both: float = 0.15  # the rest (0.15) is the identity

    @classmethod
    def from_dict(cls, d: dict | None) -> "RepairSpec":
        return from_checked_dict(cls, d, "repair")


def _arc(xy: np.ndarray) -> np.ndarray:
    pts = np.vstack([[0.0, 0.0], xy])
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])


def scale_progress(xy: np.ndarray, scale: float) -> np.ndarray:
    """The same path (from the origin through the waypoints, straight on past the last one),
    travelled `scale` times as far at each waypoint."""
    pts = np.vstack([[0.0, 0.0], xy])
    s = _arc(xy)
    target = s[1:] * scale
    out = np.empty_like(xy)
    for i, st in enumerate(target):
        j = int(np.clip(np.searchsorted(s, st, side="right") - 1, 0, len(s) - 2))
        seg = s[j + 1] - s[j]
        u = (st - s[j]) / seg if seg > 1e-9 else 0.0
        out[i] = pts[j] + u * (pts[j + 1] - pts[j])  # u > 1 past the end: straight on
    return out


def bend_heading(xy: np.ndarray, k0: int, angle_rad: float) -> np.ndarray:
    """Waypoints k0.. rotated by `angle_rad` about waypoint k0 - 1 (the origin for k0 = 0)."""
    pivot = xy[k0 - 1] if k0 > 0 else np.zeros(2)
    c, s = np.cos(angle_rad), np.sin(angle_rad)
    out = xy.copy()
    d = xy[k0:] - pivot
    out[k0:] = pivot + d @ np.array([[c, s], [-s, c]])
    return out


def perturb(xy: np.ndarray, spec: RepairSpec, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """One perturbed copy of expert waypoints (K, 2) and the kind applied."""
    u = rng.random()
    kind = ("progress" if u < spec.p_progress else "heading" if u < spec.p_progress + spec.p_heading
            else "both" if u < spec.p_progress + spec.p_heading + spec.p_both else "none")
    out = np.asarray(xy, dtype=float).copy()
    if kind in ("progress", "both"):
        delta = rng.uniform(0.05, spec.progress) * rng.choice([-1.0, 1.0])
        out = scale_progress(out, 1.0 + delta)
    if kind in ("heading", "both"):
        k0 = int(rng.integers(0, len(out) - 1))
        angle = np.deg2rad(rng.uniform(spec.heading_min_deg, spec.heading_max_deg)) * rng.choice([-1.0, 1.0])
        out = bend_heading(out, k0, angle)
    return out, kind


def perturbed_ids(ids: torch.Tensor, codec: Codec, spec: RepairSpec, rng: np.random.Generator) -> torch.Tensor:
    """(B, L) expert ids -> the same ids with each row's waypoint tokens respelled from a perturbed copy."""
    out = ids.clone()
    k = codec.schema.waypoint_field().count
    for b in range(ids.shape[0]):
        xy = codec.decode(ids[b].numpy()).waypoints
        new, _ = perturb(xy, spec, rng)
        for i in range(k):
            for pos, tok in codec.waypoint_tokens(i, new[i]).items():
                out[b, pos] = tok
    return out
