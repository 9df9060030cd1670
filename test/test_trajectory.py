"""Tests for ddrive_ros.trajectory: frames, quantisation, minimum-jerk interpolation, metrics."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddrive_ros.evaluation.metrics import ade, batch_metrics, constant_velocity_prediction, fde, l2_at
from ddrive_ros.trajectory import (
    MinJerkSpline,
    Quantizer,
    digits_decode,
    digits_decode_array,
    digits_encode,
    digits_encode_array,
    ego_to_world,
    fit_min_jerk,
    jmt_interpolate,
    path_yaw_speed,
    quaternion_to_yaw,
    to_trajectory_array,
    world_to_ego,
    wrap_angle,
    yaw_to_quaternion,
    yaw_world_to_ego,
)

finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)
angles = st.floats(min_value=-50.0, max_value=50.0, allow_nan=False, allow_infinity=False)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
Segmentwise = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (segment ids, local s) -> values (n, D)

# ----------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------


@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=8), finite, finite, angles)
def test_world_ego_round_trip_recovers_points(points, ex, ey, yaw):
    xy = np.array(points)
    ego = world_to_ego(xy, (ex, ey), yaw)
    back = ego_to_world(ego, (ex, ey), yaw)
    np.testing.assert_allclose(back, xy, atol=1e-8 * (1 + np.abs(xy).max() + abs(ex) + abs(ey)))
    # A rotation keeps distances to the ego position.
    np.testing.assert_allclose(np.linalg.norm(ego, axis=-1), np.linalg.norm(xy - (ex, ey), axis=-1), rtol=1e-9, atol=1e-6)


def test_world_to_ego_follows_rep103_x_forward_y_left():
    # Vehicle at the origin heading +90 deg (world +y): world +y is ahead, world -x is to its left.
    np.testing.assert_allclose(world_to_ego(np.array([0.0, 1.0]), (0.0, 0.0), math.pi / 2), [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(world_to_ego(np.array([-1.0, 0.0]), (0.0, 0.0), math.pi / 2), [0.0, 1.0], atol=1e-12)
    # Translation: vehicle at (5, 2) heading 0; a point 3 m ahead, 1 m to the right.
    np.testing.assert_allclose(world_to_ego(np.array([[8.0, 1.0]]), (5.0, 2.0), 0.0), [[3.0, -1.0]], atol=1e-12)
    np.testing.assert_allclose(ego_to_world(np.array([1.0, 0.0]), (0.0, 0.0), math.pi / 2), [0.0, 1.0], atol=1e-12)


@given(angles)
def test_wrap_angle_lands_in_half_open_interval_and_keeps_the_direction(a):
    w = wrap_angle(a)
    assert -math.pi < w <= math.pi
    assert math.isclose(math.cos(w), math.cos(a), abs_tol=1e-9)
    assert math.isclose(math.sin(w), math.sin(a), abs_tol=1e-9)


def test_wrap_angle_maps_both_pi_ends_to_plus_pi_and_handles_arrays():
    assert wrap_angle(math.pi) == math.pi
    assert wrap_angle(-math.pi) == math.pi
    assert -math.pi < wrap_angle(-1e-300) <= math.pi
    out = wrap_angle(np.array([3 * math.pi, -3 * math.pi / 2, 0.0]))
    np.testing.assert_allclose(out, [math.pi, math.pi / 2, 0.0], atol=1e-12)


def test_yaw_world_to_ego_wraps_the_difference():
    assert math.isclose(yaw_world_to_ego(math.radians(-170), math.radians(170)), math.radians(20), abs_tol=1e-12)
    assert math.isclose(yaw_world_to_ego(0.0, math.pi), math.pi, abs_tol=1e-12)


@given(angles)
def test_quaternion_yaw_round_trip(yaw):
    q = yaw_to_quaternion(yaw)
    assert math.isclose(sum(c * c for c in q), 1.0, abs_tol=1e-12)
    assert math.isclose(wrap_angle(quaternion_to_yaw(*q) - yaw), 0.0, abs_tol=1e-9)


def test_quaternion_to_yaw_tolerates_non_unit_quaternions():
    x, y, z, w = yaw_to_quaternion(0.7)
    assert math.isclose(quaternion_to_yaw(2 * x, 2 * y, 2 * z, 2 * w), 0.7, abs_tol=1e-12)


# ----------------------------------------------------------------------------------------------
# Quantisation
# ----------------------------------------------------------------------------------------------

Q = Quantizer(min=-20.0, step=0.1, count=401)


@given(st.lists(st.floats(min_value=-20.0, max_value=20.0), min_size=1, max_size=16))
def test_quantizer_round_trip_error_is_at_most_half_a_step_in_range(values):
    v = np.array(values)
    idx, clipped = Q.encode(v)
    assert idx.dtype == np.int64
    assert not clipped.any()
    assert np.all(np.abs(Q.decode(idx) - v) <= Q.step / 2 + 1e-9)


@given(st.floats(min_value=-1e3, max_value=1e3), st.floats(min_value=1e-3, max_value=10.0), st.integers(1, 500), st.data())
def test_quantizer_round_trip_for_any_grid(low, step, count, data):
    q = Quantizer(low, step, count)
    value = data.draw(st.floats(min_value=q.min, max_value=q.max))
    idx, clipped = q.encode(value)
    assert not clipped
    assert abs(float(q.decode(idx)) - value) <= step / 2 + 1e-9


def test_quantizer_clips_and_flags_out_of_range_values():
    idx, clipped = Q.encode([-25.0, 25.0, 20.0, -20.0, 0.0])
    np.testing.assert_array_equal(idx, [0, 400, 400, 0, 200])
    np.testing.assert_array_equal(clipped, [True, True, False, False, False])
    np.testing.assert_allclose(Q.decode(idx), [-20.0, 20.0, 20.0, -20.0, 0.0], atol=1e-12)


def test_quantizer_flags_non_finite_values_nan_to_min_bin():
    idx, clipped = Q.encode([np.nan, np.inf, -np.inf])
    np.testing.assert_array_equal(idx, [0, 400, 0])
    assert clipped.all()


def test_quantizer_rejects_bad_grids_and_indices():
    with pytest.raises(ValueError):
        Quantizer(0.0, 0.0, 10)
    with pytest.raises(ValueError):
        Quantizer(0.0, 0.1, 0)
    with pytest.raises(ValueError):
        Q.decode([401])
    with pytest.raises(ValueError):
        Q.decode([-1])


@given(st.floats(min_value=-99.9, max_value=99.9))
def test_signed_digits_round_trip_within_five_hundredths(value):
    sign, digits, clipped = digits_encode(value, 2, 1, signed=True)
    assert not clipped and sign in ("+", "-") and len(digits) == 3
    assert abs(digits_decode(sign, digits, 2, 1) - value) <= 0.05 + 1e-9


@given(st.floats(min_value=0.0, max_value=99.9))
def test_unsigned_digits_round_trip_within_five_hundredths(value):
    sign, digits, clipped = digits_encode(value, 2, 1, signed=False)
    assert sign is None and not clipped
    assert abs(digits_decode(None, digits, 2, 1) - value) <= 0.05 + 1e-9


def test_digits_encode_known_values():
    assert digits_encode(12.34, 2, 1, True) == ("+", [1, 2, 3], False)
    assert digits_encode(-3.16, 2, 1, True) == ("-", [0, 3, 2], False)
    assert digits_encode(7.0, 2, 1, False) == (None, [0, 7, 0], False)
    assert digits_encode(0.0, 2, 1, True) == ("+", [0, 0, 0], False)
    assert digits_encode(-0.04, 2, 1, True) == ("+", [0, 0, 0], False)  # rounds to zero: '+'
    assert digits_decode("-", [0, 3, 2], 2, 1) == -3.2
    assert digits_decode("+", [9, 9, 9], 2, 1) == 99.9


def test_digits_clip_and_flag_out_of_range_and_non_finite():
    assert digits_encode(123.4, 2, 1, True) == ("+", [9, 9, 9], True)
    assert digits_encode(-150.0, 2, 1, True) == ("-", [9, 9, 9], True)
    assert digits_encode(99.94, 2, 1, True)[2] is True  # beyond 99.9 even though it rounds there
    assert digits_encode(-1.0, 2, 1, False) == (None, [0, 0, 0], True)
    assert digits_encode(float("nan"), 2, 1, True) == ("-", [9, 9, 9], True)  # NaN -> low end
    assert digits_encode(float("nan"), 2, 1, False) == (None, [0, 0, 0], True)
    assert digits_encode(float("inf"), 2, 1, False) == (None, [9, 9, 9], True)


def test_digits_array_matches_scalar_encoding():
    values = np.array([[12.34, -3.16], [0.0, 150.0]])
    negative, digits, clipped = digits_encode_array(values, 2, 1, signed=True)
    assert digits.shape == (2, 2, 3)
    for i in range(2):
        for j in range(2):
            sign, d, c = digits_encode(values[i, j], 2, 1, True)
            assert (sign == "-") == negative[i, j] and d == digits[i, j].tolist() and c == clipped[i, j]
    np.testing.assert_allclose(digits_decode_array(negative, digits, 2, 1), [[12.3, -3.2], [0.0, 99.9]])


def test_digits_decode_rejects_malformed_input():
    with pytest.raises(ValueError):
        digits_decode("+", [1, 2], 2, 1)
    with pytest.raises(ValueError):
        digits_decode("+", [1, 2, 10], 2, 1)
    with pytest.raises(ValueError):
        digits_decode("x", [1, 2, 3], 2, 1)


# ----------------------------------------------------------------------------------------------
# Minimum-jerk interpolation
# ----------------------------------------------------------------------------------------------


def _smooth_drive(seed: int, irregular: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A plausible drive: waypoints (K, 2) at times (K,), start velocity and acceleration (ego frame)."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 9))
    if irregular:
        times = np.cumsum(rng.uniform(0.2, 1.2, size=k))
    else:
        times = 0.5 * np.arange(1, k + 1)
    speed0 = rng.uniform(0.0, 25.0)
    accel = rng.uniform(-3.0, 2.0)
    yaw_rate = rng.uniform(-0.4, 0.4)
    # Integrate a unicycle finely so the waypoints come from a smooth path, then add decode noise.
    fine_t = np.linspace(0.0, times[-1], 2001)
    dt = fine_t[1] - fine_t[0]
    speed = np.maximum(speed0 + accel * fine_t, 0.0)
    yaw = yaw_rate * fine_t
    velocity = np.column_stack([speed * np.cos(yaw), speed * np.sin(yaw)])
    xy = np.vstack([np.zeros((1, 2)), np.cumsum(velocity[:-1] * dt, axis=0)])  # starts at the origin
    waypoints = np.column_stack([np.interp(times, fine_t, xy[:, 0]), np.interp(times, fine_t, xy[:, 1])])
    waypoints += rng.normal(scale=0.05, size=waypoints.shape)
    v0 = np.array([speed0, 0.0])
    a0 = np.array([accel, speed0 * yaw_rate])
    return waypoints, times, v0, a0


def _gauss_inner(f: Segmentwise, g: Segmentwise, durations: np.ndarray, n: int = 12) -> float:
    """Integral over all segments of f . g, with f and g given per segment at local s in [0, 1].

    Gauss-Legendre with n nodes per segment is exact for polynomial integrands up to degree 2n - 1,
    so a quintic's squared jerk (degree 4) and a cubic's (piecewise constant) are both exact.
    """
    nodes, weights = np.polynomial.legendre.leggauss(n)
    s = 0.5 * (nodes + 1.0)
    total = 0.0
    for seg, h in enumerate(durations):
        idx = np.full(n, seg)
        total += 0.5 * h * float(np.sum(weights[:, None] * f(idx, s) * g(idx, s)))
    return total


def _gauss_integral(f: Segmentwise, durations: np.ndarray) -> float:
    """Integral of |f|^2 (f: per-segment values (n, D)); the squared-jerk cost when f is the jerk."""
    return _gauss_inner(f, f, durations)


def _jmt_jerk_integral(spline: MinJerkSpline) -> float:
    return _gauss_integral(lambda seg, s: spline.evaluate_segment(seg, s, 3), np.diff(spline.knots))


def _cubic_spline(knots: np.ndarray, values: np.ndarray, start_vel: np.ndarray, extra: str,
                  extra_value: np.ndarray | None = None) -> np.ndarray:
    """C2 piecewise cubic through (knots, values) with x'(0) = start_vel plus one more condition.

    extra: 'clamped' (x'(T) = extra_value), 'natural' (x''(T) = 0) or 'start_acc' (x''(0) = extra_value).
    Returns coefficients (K, 4, D) in local s = (t - t_i) / h_i.
    """
    h = np.diff(knots)
    k, dim = len(h), values.shape[1]
    n = 4 * k
    a = np.zeros((n, n))
    b = np.zeros((n, dim))
    row = 0

    def c(i: int, j: int) -> int:
        return 4 * i + j

    for i in range(k):
        a[row, c(i, 0)] = 1.0
        b[row] = values[i]
        row += 1
        a[row, c(i, 0):c(i, 0) + 4] = 1.0
        b[row] = values[i + 1]
        row += 1
    for i in range(k - 1):  # C1 and C2 at interior knots
        a[row, c(i, 1):c(i, 1) + 3] = np.array([1.0, 2.0, 3.0]) / h[i]
        a[row, c(i + 1, 1)] = -1.0 / h[i + 1]
        row += 1
        a[row, c(i, 2):c(i, 2) + 2] = np.array([2.0, 6.0]) / h[i] ** 2
        a[row, c(i + 1, 2)] = -2.0 / h[i + 1] ** 2
        row += 1
    a[row, c(0, 1)] = 1.0 / h[0]
    b[row] = start_vel
    row += 1
    if extra == "clamped":
        a[row, c(k - 1, 1):c(k - 1, 1) + 3] = np.array([1.0, 2.0, 3.0]) / h[-1]
        b[row] = extra_value
    elif extra == "natural":
        a[row, c(k - 1, 2):c(k - 1, 2) + 2] = np.array([2.0, 6.0]) / h[-1] ** 2
    elif extra == "start_acc":
        a[row, c(0, 2)] = 2.0 / h[0] ** 2
        b[row] = extra_value
    row += 1
    assert row == n
    return np.linalg.solve(a, b).reshape(k, 4, dim)


def _cubic_jerk_integral(coeffs: np.ndarray, knots: np.ndarray) -> float:
    h = np.diff(knots)
    return _gauss_integral(lambda seg, s: np.repeat(6.0 * coeffs[seg[:1], 3] / h[seg[:1], None] ** 3, len(s), axis=0), h)


@settings(max_examples=60, deadline=None)
@given(seeds, st.booleans())
def test_jmt_passes_through_every_waypoint_at_its_time(seed, irregular):
    waypoints, times, v0, a0 = _smooth_drive(seed, irregular)
    out = jmt_interpolate(waypoints, times, v0, a0, out_times=times)
    np.testing.assert_allclose(out, waypoints, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(seeds, st.booleans())
def test_jmt_matches_start_position_velocity_and_acceleration(seed, irregular):
    waypoints, times, v0, a0 = _smooth_drive(seed, irregular)
    spline = fit_min_jerk(waypoints, times, v0, a0)
    np.testing.assert_allclose(spline.evaluate([0.0]), [[0.0, 0.0]], atol=1e-9)
    np.testing.assert_allclose(spline.evaluate([0.0], 1)[0], v0, atol=1e-8)
    np.testing.assert_allclose(spline.evaluate([0.0], 2)[0], a0, atol=1e-7)
    # Black-box numerical check through the public sampler: one-sided differences near t = 0.
    eps = 1e-3
    x1, x2 = jmt_interpolate(waypoints, times, v0, a0, out_times=[eps, 2 * eps])
    velocity = (4 * x1 - x2) / (2 * eps)  # O(eps^2)
    acceleration = (x2 - 2 * x1) / eps**2  # O(eps)
    jerk0 = float(np.abs(spline.evaluate([0.0], 3)).max())
    np.testing.assert_allclose(velocity, v0, atol=1e-4 + 1e-5 * jerk0)
    np.testing.assert_allclose(acceleration, a0, atol=1e-3 + 2 * eps * jerk0)


@settings(max_examples=40, deadline=None)
@given(seeds, st.booleans())
def test_jmt_is_c4_at_interior_knots_with_natural_end(seed, irregular):
    # The variational optimality conditions of min int (x''')^2 (see fit_min_jerk).
    waypoints, times, v0, a0 = _smooth_drive(seed, irregular)
    spline = fit_min_jerk(waypoints, times, v0, a0)
    k = len(times)
    scale = 1.0 + np.abs(spline.coeffs).max()
    for order in range(1, 5):
        left = spline.evaluate_segment(np.arange(k - 1), np.ones(k - 1), order)
        right = spline.evaluate_segment(np.arange(1, k), np.zeros(k - 1), order)
        np.testing.assert_allclose(left, right, atol=1e-7 * scale * 10**order)
    for order in (3, 4):
        np.testing.assert_allclose(spline.evaluate_segment([k - 1], [1.0], order), 0.0, atol=1e-7 * scale * 10**order)


@settings(max_examples=40, deadline=None)
@given(seeds, st.booleans(), st.sampled_from(["clamped", "natural"]))
def test_jmt_squared_jerk_is_no_larger_than_a_cubic_spline_through_the_same_points(seed, irregular, end):
    waypoints, times, v0, _ = _smooth_drive(seed, irregular)
    knots = np.concatenate([[0.0], times])
    values = np.vstack([np.zeros(2), waypoints])
    end_velocity = (values[-1] - values[-2]) / (knots[-1] - knots[-2])
    cubic = _cubic_spline(knots, values, v0, end, end_velocity)
    # Give the JMT the cubic's start acceleration so that the cubic is an admissible competitor.
    cubic_a0 = 2.0 * cubic[0, 2] / (knots[1] - knots[0]) ** 2
    spline = fit_min_jerk(waypoints, times, v0, cubic_a0)
    j_jmt = _jmt_jerk_integral(spline)
    j_cubic = _cubic_jerk_integral(cubic, knots)
    assert j_jmt <= j_cubic * (1 + 1e-9) + 1e-9


@settings(max_examples=40, deadline=None)
@given(seeds, st.booleans())
def test_jmt_squared_jerk_is_no_larger_than_a_cubic_with_the_same_start_state(seed, irregular):
    waypoints, times, v0, a0 = _smooth_drive(seed, irregular)
    knots = np.concatenate([[0.0], times])
    cubic = _cubic_spline(knots, np.vstack([np.zeros(2), waypoints]), v0, "start_acc", a0)
    spline = fit_min_jerk(waypoints, times, v0, a0)
    assert _jmt_jerk_integral(spline) <= _cubic_jerk_integral(cubic, knots) * (1 + 1e-9) + 1e-9


@settings(max_examples=40, deadline=None)
@given(seeds, st.booleans(), st.floats(min_value=-1.0, max_value=1.0).filter(lambda e: abs(e) > 1e-3))
def test_jmt_jerk_cannot_be_lowered_by_an_admissible_perturbation(seed, irregular, eps):
    # p(t) = t^3 prod(t - t_i) keeps the start state and every waypoint, so x + eps p is admissible:
    # at the optimum the first variation int x''' p''' vanishes and J can only grow.
    waypoints, times, v0, a0 = _smooth_drive(seed, irregular)
    spline = fit_min_jerk(waypoints, times, v0, a0)
    knots = spline.knots
    poly = np.polynomial.Polynomial.fromroots(np.concatenate([[0.0, 0.0, 0.0], times]))
    poly = poly / np.abs(poly(np.linspace(0.0, knots[-1], 200))).max()
    p3 = poly.deriv(3)
    durations = np.diff(knots)

    def perturbed_jerk(direction: np.ndarray) -> Segmentwise:
        def jerk(seg: np.ndarray, s: np.ndarray) -> np.ndarray:
            t = knots[seg] + s * durations[seg]
            return spline.evaluate_segment(seg, s, 3) + eps * p3(t)[:, None] * direction
        return jerk

    j0 = _jmt_jerk_integral(spline)
    for direction in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.6, -0.8])):
        j = _gauss_integral(perturbed_jerk(direction), durations)
        assert j >= j0 * (1 - 1e-9) - 1e-9
    def jmt_jerk(seg: np.ndarray, s: np.ndarray) -> np.ndarray:
        return spline.evaluate_segment(seg, s, 3)

    def p_jerk(seg: np.ndarray, s: np.ndarray) -> np.ndarray:
        return p3(knots[seg] + s * durations[seg])[:, None]

    j_p = _gauss_integral(p_jerk, durations)
    cross = _gauss_inner(jmt_jerk, p_jerk, durations)  # summed over both axes
    assert abs(cross) <= 1e-6 * math.sqrt(2 * j0 * j_p) + 1e-9


def test_jmt_reproduces_constant_velocity_motion_and_a_single_waypoint():
    # Constant velocity 10 m/s along x: the straight line has zero jerk, so it is the optimum.
    times = np.array([0.5, 1.0, 2.0, 4.0])
    waypoints = np.column_stack([10.0 * times, np.zeros(4)])
    out = jmt_interpolate(waypoints, times, [10.0, 0.0], [0.0, 0.0], out_times=np.arange(1, 17) * 0.25)
    np.testing.assert_allclose(out[:, 0], 10.0 * np.arange(1, 17) * 0.25, atol=1e-9)
    np.testing.assert_allclose(out[:, 1], 0.0, atol=1e-9)
    single = jmt_interpolate([[5.0, 1.0]], [1.0], [4.0, 0.0], [0.0, 0.5], out_times=[1.0])
    np.testing.assert_allclose(single, [[5.0, 1.0]], atol=1e-12)


def test_jmt_holds_the_last_waypoint_after_its_time_and_defaults_to_20_stamps():
    times = 0.5 * np.arange(1, 9)
    waypoints = np.column_stack([8.0 * times, 0.2 * times**2])
    out = jmt_interpolate(waypoints, times, [8.0, 0.0], [0.0, 0.4])
    assert out.shape == (20, 2)
    np.testing.assert_allclose(out[15:], np.repeat(waypoints[-1:], 5, axis=0), atol=1e-9)  # 4.25 .. 5.0 s
    spline = fit_min_jerk(waypoints, times, [8.0, 0.0], [0.0, 0.4])
    np.testing.assert_array_equal(spline.evaluate([4.5, 6.0], 1), 0.0)


def test_jmt_rejects_invalid_waypoints():
    with pytest.raises(ValueError):
        jmt_interpolate([[1.0, 0.0], [2.0, 0.0]], [1.0, 1.0], [0, 0], [0, 0])  # not increasing
    with pytest.raises(ValueError):
        jmt_interpolate([[1.0, 0.0]], [0.0], [0, 0], [0, 0])  # t = 0 is the start, not a waypoint
    with pytest.raises(ValueError):
        jmt_interpolate([[np.nan, 0.0]], [1.0], [0, 0], [0, 0])
    with pytest.raises(ValueError):
        jmt_interpolate([[1.0, 0.0]], [1.0, 2.0], [0, 0], [0, 0])


# ----------------------------------------------------------------------------------------------
# Heading and speed along a path
# ----------------------------------------------------------------------------------------------


def test_path_yaw_speed_on_a_straight_line_gives_constant_heading_and_speed():
    times = 0.25 * np.arange(1, 21)
    heading = math.radians(30)
    xy = 12.0 * times[:, None] * np.array([math.cos(heading), math.sin(heading)])
    yaw, speed = path_yaw_speed(xy, times, start_yaw=heading, start_speed=12.0)
    np.testing.assert_allclose(yaw, heading, atol=1e-12)
    np.testing.assert_allclose(speed, 12.0, atol=1e-9)


def test_path_yaw_speed_on_an_arc_follows_the_tangent():
    times = 0.25 * np.arange(1, 21)
    xy = constant_velocity_prediction(10.0, 0.3, times)
    yaw, speed = path_yaw_speed(xy, times, start_yaw=0.0, start_speed=10.0)
    # Central differences on an arc: heading exact at interior samples, chord speed 1 - O((w h)^2).
    np.testing.assert_allclose(yaw[:-1], 0.3 * times[:-1], atol=1e-9)
    np.testing.assert_allclose(speed, 10.0, rtol=2e-3)


def test_path_yaw_speed_holds_heading_while_stopped():
    times = 0.5 * np.arange(1, 7)
    xy = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    yaw, speed = path_yaw_speed(xy, times, start_yaw=0.4, start_speed=0.0)
    np.testing.assert_allclose(yaw[:2], 0.4)  # nothing moved yet: keep the start heading
    np.testing.assert_allclose(yaw[3:], math.pi / 2)
    np.testing.assert_allclose(speed[:2], 0.0)
    np.testing.assert_allclose(speed[-1], 2.0)
    # A sample at t = 0 is the start itself and reports the given start state.
    yaw0, speed0 = path_yaw_speed(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.0, 0.5]), 0.2, 1.5)
    np.testing.assert_allclose([yaw0[0], speed0[0]], [0.2, 1.5])
    np.testing.assert_allclose([yaw0[1], speed0[1]], [0.0, 2.0])


def test_to_trajectory_array_stacks_t_x_y_yaw_v():
    arr = to_trajectory_array([0.5, 1.0], [[1.0, 2.0], [3.0, 4.0]], [0.1, 0.2], [5.0, 6.0])
    np.testing.assert_array_equal(arr, [[0.5, 1.0, 2.0, 0.1, 5.0], [1.0, 3.0, 4.0, 0.2, 6.0]])
    with pytest.raises(ValueError):
        to_trajectory_array([0.5], [[1.0, 2.0], [3.0, 4.0]], [0.1, 0.2], [5.0, 6.0])


# ----------------------------------------------------------------------------------------------
# Metrics and baseline
# ----------------------------------------------------------------------------------------------

PRED = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
TRUTH = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 2.0]])
TIMES = np.array([1.0, 2.0, 3.0])


def test_ade_and_fde_on_a_hand_computed_example():
    assert ade(PRED, TRUTH) == pytest.approx(1.0)  # errors 0, 1, 2
    assert fde(PRED, TRUTH) == pytest.approx(2.0)
    assert ade(PRED + [3.0, 4.0], PRED) == pytest.approx(5.0)


def test_l2_at_interpolates_linearly_and_is_nan_outside():
    out = l2_at(PRED, TRUTH, TIMES, at=(0.5, 1.0, 1.5, 2.0, 2.75, 3.0, 4.0))
    assert math.isnan(out[0.5]) and math.isnan(out[4.0])
    assert out[1.0] == pytest.approx(0.0)
    assert out[1.5] == pytest.approx(0.5)
    assert out[2.0] == pytest.approx(1.0)
    assert out[2.75] == pytest.approx(1.75)
    assert out[3.0] == pytest.approx(2.0)
    assert list(l2_at(PRED, TRUTH, TIMES)) == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_batch_metrics_average_over_the_batch():
    pred = np.stack([PRED, PRED])
    truth = np.stack([TRUTH, PRED + [0.0, 4.0]])  # second: constant 4 m error
    m = batch_metrics(pred, truth, TIMES, at=(1.0, 2.0, 3.0, 3.5))
    assert m.count == 2
    assert m.ade == pytest.approx((1.0 + 4.0) / 2)
    assert m.fde == pytest.approx((2.0 + 4.0) / 2)
    assert m.l2_at[1.0] == pytest.approx(2.0)
    assert m.l2_at[2.0] == pytest.approx(2.5)
    assert m.l2_at[3.0] == pytest.approx(3.0)
    assert math.isnan(m.l2_at[3.5])


def test_metrics_reject_mismatched_shapes():
    with pytest.raises(ValueError):
        ade(PRED, TRUTH[:2])
    with pytest.raises(ValueError):
        batch_metrics(PRED, TRUTH, TIMES)  # not batched


def test_constant_velocity_prediction_drives_straight_without_yaw_rate():
    times = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(constant_velocity_prediction(10.0, 0.0, times), [[5.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    # Tiny yaw rates are continuous with the straight line (no 0/0).
    np.testing.assert_allclose(constant_velocity_prediction(10.0, 1e-12, times),
                               constant_velocity_prediction(10.0, 0.0, times), atol=1e-9)


def test_constant_velocity_prediction_follows_a_circle_of_radius_v_over_w():
    speed, yaw_rate = 8.0, -0.5  # turning right
    times = 0.25 * np.arange(1, 21)
    xy = constant_velocity_prediction(speed, yaw_rate, times)
    radius = speed / yaw_rate  # signed: centre at (0, R), to the right here
    np.testing.assert_allclose(np.hypot(xy[:, 0], xy[:, 1] - radius), abs(radius), rtol=1e-12)
    # Arc length travelled is v t: the chord from the origin subtends angle w t.
    np.testing.assert_allclose(np.linalg.norm(xy, axis=1), 2 * abs(radius) * np.abs(np.sin(yaw_rate * times / 2)), rtol=1e-12)
    assert np.all(xy[:, 1] < 0)
