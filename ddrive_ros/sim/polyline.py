"""A planar polyline with arc length: the one geometric primitive of the synthetic world.

Roads, lanes and the ego route are all polylines sampled densely (0.5 m). Lookups by arc length
interpolate linearly and extrapolate straight past both ends, so an agent that drives off the end
of a road keeps moving instead of freezing.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Polyline:
    xy: np.ndarray  # (N, 2) world points
    s: np.ndarray  # (N,) cumulative arc length, s[0] may be non-zero (a road's reference coordinate)
    heading: np.ndarray  # (N,) unwrapped tangent heading, rad
    curvature: np.ndarray  # (N,) 1/m, positive turning left

    @classmethod
    def from_points(cls, xy: ArrayLike, s0: float = 0.0) -> "Polyline":
        pts = np.asarray(xy, dtype=float)
        seg = np.diff(pts, axis=0)
        keep = np.concatenate([[True], np.hypot(seg[:, 0], seg[:, 1]) > 1e-9])
        pts = pts[keep]
        if len(pts) < 2:
            raise ValueError("a polyline needs at least two distinct points")
        seg = np.diff(pts, axis=0)
        length = np.hypot(seg[:, 0], seg[:, 1])
        s = s0 + np.concatenate([[0.0], np.cumsum(length)])
        seg_heading = np.unwrap(np.arctan2(seg[:, 1], seg[:, 0]))
        # vertex heading: mean of the adjacent segments (ends take their only segment)
        heading = np.empty(len(pts))
        heading[0], heading[-1] = seg_heading[0], seg_heading[-1]
        heading[1:-1] = 0.5 * (seg_heading[:-1] + seg_heading[1:])
        curvature = np.gradient(heading, s) if len(pts) > 2 else np.zeros(len(pts))
        return cls(pts, s, heading, curvature)

    @classmethod
    def from_curvature(cls, s: ArrayLike, curvature: ArrayLike, x0: float = 0.0, y0: float = 0.0,
                       heading0: float = 0.0, s_origin: float = 0.0) -> "Polyline":
        """Integrate a curvature profile; the pose (x0, y0, heading0) is taken at arc length `s_origin`."""
        s = np.asarray(s, dtype=float)
        kappa = np.asarray(curvature, dtype=float)
        ds = np.diff(s)
        heading = np.concatenate([[0.0], np.cumsum(0.5 * (kappa[1:] + kappa[:-1]) * ds)])
        mid = 0.5 * (heading[1:] + heading[:-1])
        x = np.concatenate([[0.0], np.cumsum(np.cos(mid) * ds)])
        y = np.concatenate([[0.0], np.cumsum(np.sin(mid) * ds)])
        # move the pose at s_origin to (x0, y0, heading0)
        h_o = np.interp(s_origin, s, heading)
        xo, yo = np.interp(s_origin, s, x), np.interp(s_origin, s, y)
        rot = heading0 - h_o
        c, sn = np.cos(rot), np.sin(rot)
        xr = c * (x - xo) - sn * (y - yo) + x0
        yr = sn * (x - xo) + c * (y - yo) + y0
        return cls(np.stack([xr, yr], axis=1), s.copy(), heading + rot, kappa.copy())

    @cached_property
    def is_straight(self) -> bool:
        return bool(np.ptp(self.heading) < 1e-9)

    @property
    def length(self) -> float:
        return float(self.s[-1] - self.s[0])

    def point_at(self, s: ArrayLike) -> np.ndarray:
        """(..., 2) points at arc length s, straight extrapolation beyond the ends."""
        s = np.asarray(s, dtype=float)
        sc = np.clip(s, self.s[0], self.s[-1])
        x = np.interp(sc, self.s, self.xy[:, 0])
        y = np.interp(sc, self.s, self.xy[:, 1])
        h = np.interp(sc, self.s, self.heading)
        over = s - sc
        return np.stack([x + over * np.cos(h), y + over * np.sin(h)], axis=-1)

    def heading_at(self, s: ArrayLike) -> np.ndarray:
        return np.interp(np.asarray(s, dtype=float), self.s, self.heading)

    def curvature_at(self, s: ArrayLike) -> np.ndarray:
        return np.interp(np.asarray(s, dtype=float), self.s, self.curvature)

    def pose_at(self, s: ArrayLike, d: ArrayLike = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Points offset by d (left positive) from the line at s, and the tangent heading there."""
        h = self.heading_at(s)
        p = self.point_at(s)
        d = np.asarray(d, dtype=float)
        normal = np.stack([-np.sin(h), np.cos(h)], axis=-1)
        return p + normal * d[..., None], h

    def offset(self, d: ArrayLike, step: float | None = None) -> "Polyline":
        """The parallel curve at lateral offset d (scalar or one value per vertex)."""
        if step is None:
            s = self.s
        else:
            s = np.arange(self.s[0], self.s[-1] + 1e-9, step)
            d = np.asarray(d, dtype=float)
            if d.ndim:
                d = np.interp(s, self.s, d)
        pts, _ = self.pose_at(s, np.broadcast_to(np.asarray(d, dtype=float), s.shape))
        return Polyline.from_points(pts)

    def slice(self, s_lo: float, s_hi: float, step: float | None = None) -> np.ndarray:
        """Points of the line between two arc lengths (inclusive ends), optionally resampled."""
        s_lo, s_hi = max(s_lo, self.s[0]), min(s_hi, self.s[-1])
        if s_hi <= s_lo:
            return np.zeros((0, 2))
        if step is None:
            inner = self.s[(self.s > s_lo) & (self.s < s_hi)]
        else:
            inner = np.arange(s_lo + step, s_hi, step)
        return self.point_at(np.concatenate([[s_lo], inner, [s_hi]]))

    def project(self, points: ArrayLike, s_lo: float | None = None, s_hi: float | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Arc length and signed lateral offset (left positive) of the nearest point on the line.

        `s_lo`/`s_hi` restrict the search to a window (the caller's previous estimate), which both
        speeds it up and keeps a self-approaching route (a U-shaped path) from snapping to the
        wrong leg.
        """
        pts = np.atleast_2d(np.asarray(points, dtype=float))
        if self.is_straight:  # closed form (and the same straight extrapolation past the ends)
            c, sn = np.cos(self.heading[0]), np.sin(self.heading[0])
            rel = pts - self.xy[0]
            return self.s[0] + rel[:, 0] * c + rel[:, 1] * sn, rel[:, 1] * c - rel[:, 0] * sn
        i0 = 0 if s_lo is None else max(int(np.searchsorted(self.s, s_lo)) - 1, 0)
        i1 = len(self.s) if s_hi is None else min(int(np.searchsorted(self.s, s_hi)) + 1, len(self.s))
        i1 = max(i1, i0 + 2)
        a = self.xy[i0:i1 - 1]
        ab = self.xy[i0 + 1:i1] - a
        seg_len2 = np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12)
        ap = pts[:, None, :] - a[None, :, :]  # (M, K, 2)
        t = np.clip(np.einsum("mkj,kj->mk", ap, ab) / seg_len2, 0.0, 1.0)
        closest = a[None] + t[..., None] * ab[None]
        dist2 = np.sum((pts[:, None, :] - closest) ** 2, axis=-1)
        k = np.argmin(dist2, axis=1)
        rows = np.arange(len(pts))
        seg_s0 = self.s[i0:i1 - 1]
        seg_l = np.sqrt(seg_len2)
        s = seg_s0[k] + t[rows, k] * seg_l[k]
        cross = ab[k, 0] * ap[rows, k, 1] - ab[k, 1] * ap[rows, k, 0]
        d = np.sign(cross) * np.sqrt(dist2[rows, k])
        # beyond either end the straight extrapolation defines s, as in point_at
        tangent = ab[k] / seg_l[k, None]
        along = np.einsum("ij,ij->i", pts - closest[rows, k], tangent)
        at_end = ((k == len(seg_s0) - 1) & (t[rows, k] >= 1.0) & (i1 == len(self.s))) | (
            (k == 0) & (t[rows, k] <= 0.0) & (i0 == 0))
        s = np.where(at_end, s + along, s)
        d = np.where(at_end, cross / seg_l[k], d)
        return s, d
