"""Trajectory math shared by the codec, the planner and the evaluator.

Conventions (REP 103): x forward, y left, z up; metres, radians, seconds. A
trajectory is planned in the ego frame at the observation time: the vehicle is
at the origin, heading along +x, at t = 0.

Contents:
- frames: world <-> ego, yaw wrapping, quaternion <-> yaw;
- quantisation: uniform bins (`Quantizer`) and fixed-point decimal digits
  ("dd.d" / "sdd.d"), both clipping out-of-range values and flagging them;
- minimum-jerk (JMT) interpolation of a few decoded waypoints onto the 20
  output stamps, plus heading/speed by finite differences;
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ddrive_ros.timeline import OUTPUT_TIMES

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------


def wrap_angle(a: ArrayLike) -> np.ndarray | float:
    """Wrap angles to (-pi, pi]. Scalars come back as float, arrays as arrays; NaN stays NaN."""
    arr = np.asarray(a, dtype=float)
    wrapped = np.pi - np.mod(np.pi - arr, 2.0 * np.pi)
    # np.mod can round up to exactly 2*pi for tiny negative inputs, which would give -pi.
    wrapped = np.where(wrapped <= -np.pi, wrapped + 2.0 * np.pi, wrapped)
    return float(wrapped) if wrapped.ndim == 0 else wrapped


def _rotation(yaw: float) -> np.ndarray:
    """2x2 matrix rotating ego-frame vectors into the world frame (counter-clockwise by yaw)."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s], [s, c]])


def _as_points(xy: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(xy, dtype=float)
    if arr.ndim < 1 or arr.shape[-1] != 2:
        raise ValueError(f"{name} must have shape (..., 2), got {arr.shape}")
    return arr


def world_to_ego(xy_world: ArrayLike, ego_xy: ArrayLike, ego_yaw: float) -> np.ndarray:
    """Express world points (..., 2) in the ego frame of a vehicle at `ego_xy` heading `ego_yaw`.

    p_ego = R(-yaw) (p_world - ego_xy); a point ahead of the vehicle gets x > 0, one to its left y > 0.
    """
    pts = _as_points(xy_world, "xy_world")
    origin = _as_points(ego_xy, "ego_xy").reshape(2)
    # Row vectors: (R^T v)^T = v^T R, so multiplying by R on the right applies R(-yaw).
    return (pts - origin) @ _rotation(float(ego_yaw))


def ego_to_world(xy_ego: ArrayLike, ego_xy: ArrayLike, ego_yaw: float) -> np.ndarray:
    """Inverse of `world_to_ego`: p_world = R(yaw) p_ego + ego_xy."""
    pts = _as_points(xy_ego, "xy_ego")
    origin = _as_points(ego_xy, "ego_xy").reshape(2)
    return pts @ _rotation(float(ego_yaw)).T + origin


def yaw_world_to_ego(yaw: ArrayLike, ego_yaw: float) -> np.ndarray | float:
    """Heading relative to the ego heading, wrapped to (-pi, pi]."""
    return wrap_angle(np.asarray(yaw, dtype=float) - float(ego_yaw))


def quaternion_to_yaw(x: float, y: float, z: float, w: float) -> float:
    """Yaw (rotation about z, ZYX convention as in tf2) of a quaternion.

    Written as atan2(2(wz + xy), w^2 + x^2 - y^2 - z^2) rather than with 1 - 2(y^2 + z^2) so that a
    quaternion that is not exactly unit length still gives the right angle (both terms scale by |q|^2).
    """
    return float(np.arctan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z))


def yaw_to_quaternion(yaw: float) -> tuple[float, float, float, float]:
    """Planar rotation by `yaw` as a unit quaternion (x, y, z, w)."""
    half = 0.5 * float(yaw)
    return (0.0, 0.0, float(np.sin(half)), float(np.cos(half)))


# ----------------------------------------------------------------------------------------------
# Quantisation
# ----------------------------------------------------------------------------------------------

# Values beyond the range by less than this fraction of a step are float noise, not clipping.
_RANGE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Quantizer:
    """Uniform bins min, min + step, ..., min + step * (count - 1); a value maps to its nearest bin."""

    min: float
    step: float
    count: int

    def __post_init__(self) -> None:
        if not (np.isfinite(self.min) and np.isfinite(self.step) and self.step > 0):
            raise ValueError(f"Quantizer needs a finite min and a positive step, got min={self.min} step={self.step}")
        if int(self.count) != self.count or self.count < 1:
            raise ValueError(f"Quantizer count must be a positive integer, got {self.count}")

    @property
    def max(self) -> float:
        """Centre of the last bin: the largest value that encodes without clipping."""
        return self.min + self.step * (self.count - 1)

    def encode(self, values: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Bin indices (int64) and a flag per value that was outside [min, max] or not finite.

        Clipped values go to the nearest end; NaN has no nearest end and goes to bin 0.
        Inside the range the round-trip error is at most step / 2.
        """
        v = np.asarray(values, dtype=float)
        tol = _RANGE_TOLERANCE * self.step
        finite = np.isfinite(v)
        with np.errstate(invalid="ignore"):
            clipped = ~finite | (v < self.min - tol) | (v > self.max + tol)
        safe = np.where(np.isnan(v), self.min, v)  # +-inf survive and are clipped below
        safe = np.clip(safe, self.min, self.max)
        idx = np.rint((safe - self.min) / self.step)
        idx = np.clip(idx, 0, self.count - 1).astype(np.int64)
        return idx, clipped

    def decode(self, indices: ArrayLike) -> np.ndarray:
        """Bin centres for `indices`; an index outside [0, count) is a caller bug and raises."""
        idx = np.asarray(indices)
        if idx.size and (not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= self.count):
            raise ValueError(f"indices must be integers in [0, {self.count}), got {idx!r}")
        return self.min + self.step * idx.astype(float)


def _digit_limits(int_digits: int, frac_digits: int) -> tuple[int, int]:
    """(scale, largest integer magnitude) of a fixed-point decimal with the given digit counts."""
    if int_digits < 0 or frac_digits < 0 or int_digits + frac_digits < 1:
        raise ValueError(f"need at least one digit, got int_digits={int_digits} frac_digits={frac_digits}")
    return 10**frac_digits, 10 ** (int_digits + frac_digits) - 1


def digits_encode_array(
    values: ArrayLike, int_digits: int, frac_digits: int, signed: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised fixed-point encoding: (negative bool (...), digits int64 (..., n), clipped bool (...)).

    Digits are most significant first, n = int_digits + frac_digits. The representable range is
    [-M, M] (signed) or [0, M] (unsigned) with M = 10**int_digits - 10**-frac_digits, e.g. 99.9.
    Out-of-range and non-finite values clip to the nearest end and are flagged; NaN goes to the
    low end, as in `Quantizer`. Zero (including values that round to zero) is never negative.
    """
    scale, limit = _digit_limits(int_digits, frac_digits)
    v = np.asarray(values, dtype=float)
    low = -limit if signed else 0
    n_float = np.where(np.isnan(v), low, v * scale)  # in units of the last digit
    tol = _RANGE_TOLERANCE
    with np.errstate(invalid="ignore"):
        clipped = ~np.isfinite(v) | (n_float < low - tol) | (n_float > limit + tol)
    n = np.clip(np.rint(np.clip(n_float, low, limit)), low, limit).astype(np.int64)
    negative = n < 0
    magnitude = np.abs(n)
    powers = 10 ** np.arange(int_digits + frac_digits - 1, -1, -1, dtype=np.int64)
    digits = (magnitude[..., None] // powers) % 10
    return negative, digits, clipped


def digits_decode_array(negative: ArrayLike, digits: ArrayLike, int_digits: int, frac_digits: int) -> np.ndarray:
    """Inverse of `digits_encode_array`."""
    scale, _ = _digit_limits(int_digits, frac_digits)
    d = np.asarray(digits)
    n_digits = int_digits + frac_digits
    if d.shape[-1:] != (n_digits,) or not np.issubdtype(d.dtype, np.integer) or np.any((d < 0) | (d > 9)):
        raise ValueError(f"digits must be integers 0..9 with last axis {n_digits}, got {d!r}")
    powers = 10 ** np.arange(n_digits - 1, -1, -1, dtype=np.int64)
    magnitude = (d.astype(np.int64) * powers).sum(axis=-1)
    sign = np.where(np.asarray(negative, dtype=bool), -1.0, 1.0)
    # Integer / power of ten is one correctly rounded division: 123 / 10 -> 12.3 exactly as printed.
    return sign * (magnitude / scale)


def digits_encode(
    value: float, int_digits: int, frac_digits: int, signed: bool
) -> tuple[str | None, list[int], bool]:
    """Fixed-point decimal digits of one value, e.g. -3.14 with 2+1 signed -> ('-', [0, 3, 1], False).

    Sign is '+' or '-' when `signed` (zero is '+'), None otherwise. See `digits_encode_array`.
    """
    negative, digits, clipped = digits_encode_array(float(value), int_digits, frac_digits, signed)
    sign = ("-" if bool(negative) else "+") if signed else None
    return sign, [int(d) for d in digits], bool(clipped)


def digits_decode(sign: str | None, digits: Sequence[int], int_digits: int, frac_digits: int) -> float:
    """Value of a fixed-point decimal; `sign` is '+', '-' or None (unsigned)."""
    if sign not in ("+", "-", None):
        raise ValueError(f"sign must be '+', '-' or None, got {sign!r}")
    arr = np.asarray(list(digits), dtype=np.int64)
    return float(digits_decode_array(sign == "-", arr, int_digits, frac_digits))


# ----------------------------------------------------------------------------------------------
# Minimum-jerk interpolation
# ----------------------------------------------------------------------------------------------

_DEGREE = 5  # quintic: x^(6) = 0 is the Euler-Lagrange equation of min integral (x''')^2
_N_COEF = _DEGREE + 1
# _FALLING[d, k] = k (k-1) ... (k-d+1): coefficient of s^(k-d) in d^d/ds^d s^k (0 when k < d).
_FALLING = np.array(
    [[float(np.prod(np.arange(k - d + 1, k + 1))) if k >= d else 0.0 for k in range(_N_COEF)] for d in range(_N_COEF)]
)


def _basis(s: np.ndarray, order: int) -> np.ndarray:
    """Rows d^order/ds^order [1, s, ..., s^5] at each s: shape s.shape + (6,)."""
    k = np.arange(_N_COEF)
    return _FALLING[order] * np.asarray(s, dtype=float)[..., None] ** np.maximum(k - order, 0)


@dataclass(frozen=True, eq=False)
class MinJerkSpline:
    """Piecewise quintic x(t) over knots 0 = t_0 < ... < t_K, one polynomial per segment.

    Segment i uses local time s = (t - t_i) / h_i in [0, 1]: x(t) = sum_k coeffs[i, k] s^k.
    Outside [0, T] the trajectory holds its end value: positions clamp, derivatives are zero.
    """

    knots: np.ndarray  # (K + 1,) starting at 0
    coeffs: np.ndarray  # (K, 6, D)
    _durations: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_durations", np.diff(self.knots))

    @property
    def end_time(self) -> float:
        return float(self.knots[-1])

    def evaluate_segment(self, segment: ArrayLike, s: ArrayLike, order: int = 0) -> np.ndarray:
        """d^order x / dt^order on `segment` at local time s (no clamping): shape s.shape + (D,)."""
        seg = np.asarray(segment, dtype=np.int64)
        h = self._durations[seg]
        rows = _basis(np.asarray(s, dtype=float), order)
        return np.einsum("...k,...kd->...d", rows, self.coeffs[seg]) / (h**order)[..., None]

    def evaluate(self, times: ArrayLike, order: int = 0) -> np.ndarray:
        """d^order x / dt^order at `times` (N,): shape (N, D)."""
        t = np.atleast_1d(np.asarray(times, dtype=float))
        inside = (t >= 0.0) & (t <= self.end_time)
        tc = np.clip(t, 0.0, self.end_time)
        seg = np.clip(np.searchsorted(self.knots, tc, side="right") - 1, 0, len(self._durations) - 1)
        s = (tc - self.knots[seg]) / self._durations[seg]
        out = self.evaluate_segment(seg, s, order)
        if order > 0:
            out = np.where(inside[:, None], out, 0.0)
        return out


def _validate_waypoints(waypoints_xy: np.ndarray, waypoint_times: np.ndarray) -> None:
    if waypoints_xy.ndim != 2 or waypoints_xy.shape[0] < 1:
        raise ValueError(f"waypoints must be (K >= 1, D), got {waypoints_xy.shape}")
    if waypoint_times.shape != (waypoints_xy.shape[0],):
        raise ValueError(f"waypoint_times must be ({waypoints_xy.shape[0]},), got {waypoint_times.shape}")
    if not (np.all(np.isfinite(waypoints_xy)) and np.all(np.isfinite(waypoint_times))):
        raise ValueError("waypoints and their times must be finite")
    if waypoint_times[0] <= 0.0 or np.any(np.diff(waypoint_times) <= 0.0):
        raise ValueError(f"waypoint_times must be positive and strictly increasing, got {waypoint_times}")


def fit_min_jerk(
    waypoints_xy: ArrayLike, waypoint_times: ArrayLike, v0: ArrayLike, a0: ArrayLike
) -> MinJerkSpline:
    """The minimum-jerk interpolant from the origin at t = 0 through every waypoint.

    Minimising J = int_0^T |x'''|^2 dt subject to x(0) = 0, x'(0) = v0, x''(0) = a0 and
    x(t_i) = p_i gives, per axis, (integrating the first variation by parts):
      - x^(6) = 0 on each segment -> a quintic per segment (6 unknowns each, 6K in all);
      - at interior knots x, x', x'' are continuous (admissibility) and the boundary terms
        x''' dx'' - x'''' dx' vanish for any dx', dx'' only if x''' and x'''' are continuous too:
        C4. x''''' may jump, because dx = 0 at a knot;
      - at t = 0 position, velocity and acceleration are prescribed: no natural condition;
      - at t = T the position is prescribed but dx'(T), dx''(T) are free: x'''(T) = x''''(T) = 0.
    Count: 2K positions + 2 start derivatives + 4(K-1) continuity + 2 end = 6K equations.
    The optimum is unique (J = 0 forces a quadratic fixed by the start state), so the system is
    non-singular. D axes are solved together as D right-hand sides.
    """
    p = np.asarray(waypoints_xy, dtype=float)
    t = np.asarray(waypoint_times, dtype=float)
    _validate_waypoints(p, t)
    n_seg, dim = p.shape
    v0 = np.asarray(v0, dtype=float).reshape(dim)
    a0 = np.asarray(a0, dtype=float).reshape(dim)
    if not (np.all(np.isfinite(v0)) and np.all(np.isfinite(a0))):
        raise ValueError("v0 and a0 must be finite")

    knots = np.concatenate([[0.0], t])
    h = np.diff(knots)
    # the matrix depends on the waypoint times alone (a planner's are the same every plan): its
    # inverse is kept, and each fit is one product with the right-hand side
    inverse = _min_jerk_inverse(tuple(t.tolist()))
    rhs = np.zeros((_N_COEF * n_seg, dim))
    rhs[1:n_seg] = p[:-1]  # each segment starts on the previous waypoint (the first at the origin)
    rhs[n_seg:2 * n_seg] = p  # and ends on its own
    rhs[2 * n_seg] = v0 * h[0]
    rhs[2 * n_seg + 1] = a0 * h[0] ** 2
    solution = inverse @ rhs
    return MinJerkSpline(knots=knots, coeffs=solution.reshape(n_seg, _N_COEF, dim))


@functools.lru_cache(maxsize=64)
def _min_jerk_inverse(waypoint_times: tuple[float, ...]) -> np.ndarray:
    """The inverse of `fit_min_jerk`'s linear system for these waypoint times (rows in the order
    the right-hand side is written there: start points, end points, v0, a0, C1..C4, natural end)."""
    t = np.asarray(waypoint_times, dtype=float)
    n_seg = len(t)
    knots = np.concatenate([[0.0], t])
    h = np.diff(knots)
    n_unknown = _N_COEF * n_seg
    a_mat = np.zeros((n_unknown, n_unknown))
    seg = np.arange(n_seg)
    cols = _N_COEF * seg[:, None] + np.arange(_N_COEF)  # (K, 6) column indices of each segment
    at_start = _basis(np.zeros(1), 0)[0]
    at_end = [_basis(np.ones(1), d)[0] for d in range(_N_COEF)]

    row = 0
    # Each segment starts and ends on its waypoints.
    a_mat[row + seg[:, None], cols] = at_start
    row += n_seg
    a_mat[row + seg[:, None], cols] = at_end[0]
    row += n_seg
    # Start velocity and acceleration (rows scaled by h_0^d to keep entries O(1)).
    for d in (1, 2):
        a_mat[row, cols[0]] = _basis(np.zeros(1), d)[0]
        row += 1
    # C1..C4 at interior knots; row for order d multiplied by h_{j-1}^d.
    left, right = seg[:-1], seg[1:]
    n_int = n_seg - 1
    for d in range(1, 5):
        rows = row + np.arange(n_int)
        a_mat[rows[:, None], cols[left]] = at_end[d]
        ratio = (h[left] / h[right]) ** d
        a_mat[rows[:, None], cols[right]] = -ratio[:, None] * _basis(np.zeros(1), d)[0]
        row += n_int
    # Natural end conditions: jerk and snap vanish at T.
    for d in (3, 4):
        a_mat[row, cols[-1]] = at_end[d]
        row += 1
    assert row == n_unknown, "equation count must equal 6 per segment"
    inverse = np.linalg.inv(a_mat)
    inverse.setflags(write=False)
    return inverse


def jmt_interpolate(
    waypoints_xy: ArrayLike,
    waypoint_times: ArrayLike,
    v0: ArrayLike,
    a0: ArrayLike,
    out_times: ArrayLike | None = None,
) -> np.ndarray:
    """Sample the minimum-jerk trajectory through the waypoints at `out_times` -> (len(out_times), 2).

    The start state is the ego pose: origin at t = 0 with ego-frame velocity `v0` and acceleration
    `a0` (vectors, m/s and m/s^2). `waypoint_times` must be positive and strictly increasing.
    `out_times` defaults to the plan's output stamps (timeline.OUTPUT_TIMES). Stamps after the last waypoint hold the
    last waypoint (the decoded plan says nothing beyond it, and extrapolating a quintic explodes);
    stamps before 0 hold the origin.
    """
    times = np.asarray(OUTPUT_TIMES if out_times is None else out_times, dtype=float)
    spline = fit_min_jerk(waypoints_xy, waypoint_times, v0, a0)
    if np.any(times > spline.end_time):
        logger.debug("jmt_interpolate: %d stamps after the last waypoint (%.2f s) hold it",
                     int(np.sum(times > spline.end_time)), spline.end_time)
    return spline.evaluate(times.reshape(-1))


def path_yaw_speed(
    xy: ArrayLike,
    times: ArrayLike,
    start_yaw: float = 0.0,
    start_speed: float = 0.0,
    *,
    start_xy: ArrayLike = (0.0, 0.0),
    min_displacement: float = 0.05,
) -> tuple[np.ndarray, np.ndarray]:
    """Heading (direction of motion) and speed at each sample of a path, by finite differences.

    The path continues from a known start state: `start_xy` (default the ego origin) at t = 0 with
    `start_yaw` and `start_speed`. If times[0] > 0 that start is used as the previous sample; if
    times[0] == 0, sample 0 *is* the start and gets start_yaw / start_speed. Differences are central
    where there is a next sample, backward at the end. Where the chord of the difference is shorter
    than `min_displacement` (a stopped vehicle) the heading of the sample before is held, since
    atan2 of noise is meaningless. Forward driving is assumed.
    """
    pts = _as_points(xy, "xy")
    t = np.asarray(times, dtype=float)
    if pts.ndim != 2 or t.shape != (pts.shape[0],) or pts.shape[0] < 1:
        raise ValueError(f"xy must be (N >= 1, 2) and times (N,), got {pts.shape} and {t.shape}")
    if t[0] < 0.0 or np.any(np.diff(t) <= 0.0):
        raise ValueError(f"times must be non-negative and strictly increasing, got {t}")
    start = np.asarray(start_xy, dtype=float).reshape(1, 2)
    prepend = t[0] > 0.0
    all_pts = np.vstack([start, pts]) if prepend else pts
    all_t = np.concatenate([[0.0], t]) if prepend else t
    m = len(all_t)

    yaw = np.full(m, float(start_yaw))
    speed = np.full(m, float(start_speed))
    if m > 1:
        i = np.arange(1, m)
        nxt = np.minimum(i + 1, m - 1)  # last sample: backward difference (nxt == i)
        prv = i - 1
        chord = all_pts[nxt] - all_pts[prv]
        velocity = chord / (all_t[nxt] - all_t[prv])[:, None]
        speed[1:] = np.linalg.norm(velocity, axis=1)
        moving = np.linalg.norm(chord, axis=1) >= min_displacement
        yaw[1:] = np.where(moving, np.arctan2(velocity[:, 1], velocity[:, 0]), np.nan)
        # Forward-fill held headings: index of the last sample with a valid heading (0 always is).
        valid = np.concatenate([[True], moving])
        last_valid = np.maximum.accumulate(np.where(valid, np.arange(m), 0))
        yaw = yaw[last_valid]
    yaw = np.asarray(wrap_angle(yaw), dtype=float)
    sl = slice(1, None) if prepend else slice(None)
    return yaw[sl], speed[sl]


def to_trajectory_array(times: ArrayLike, xy: ArrayLike, yaw: ArrayLike, speed: ArrayLike) -> np.ndarray:
    """Stack into the planner's (N, 5) trajectory layout: columns t, x, y, yaw, v."""
    t = np.asarray(times, dtype=float).reshape(-1)
    pts = _as_points(xy, "xy").reshape(-1, 2)
    yw = np.asarray(yaw, dtype=float).reshape(-1)
    v = np.asarray(speed, dtype=float).reshape(-1)
    n = len(t)
    if not (len(pts) == len(yw) == len(v) == n):
        raise ValueError(f"lengths differ: times {n}, xy {len(pts)}, yaw {len(yw)}, speed {len(v)}")
    return np.column_stack([t, pts, yw, v])
