"""A jerk-penalised speed profile along a decoded plan's path.

Why (measured on validation seed 31, docs/closed_loop.md): the full model's plans fail nuPlan's comfort bound
in the closed loop mostly on longitudinal jerk (25 of 60 episodes for the transfer + swap candidate, 10 for the
shipped model). Waypoints are decoded at 0.1 m resolution 0.5 s apart and the minimum-jerk spline goes through
every one of them exactly, so a 0.1 m wobble in spacing becomes a speed and acceleration wobble, and the
controller tracks it. A planner's velocity smoother (Autoware's motion_velocity_smoother is one) keeps the path
and re-times the motion along it.

Here: the path is the plan's own polyline (its geometry is kept exactly). Along it, the arc length s(t) is fit
with a piecewise-constant jerk on the output grid (0.25 s), starting from the ego's current speed and
longitudinal acceleration, minimising

    sum_k (s(t_k) - s_plan(t_k))^2  +  weight * sum_m j_m^2 * dt

(a ridge regression with one unknown per interval: closed form, microseconds). The result is made
non-decreasing (no reversing) and never passes the plan's own end point, then the positions are re-sampled
along the polyline at the new arc lengths. `weight` 0 returns the plan unchanged.

Smoothing may only make the plan more cautious: at no stamp is the re-timed plan more than `lead_m` further
along the path than the decoded one. A plan that brakes hard now (a lead vehicle stopping, a pedestrian)
starts from an acceleration near zero, and a jerk-penalised fit would spread its braking over the first
second; capped, it brakes as late as the decoded plan allows and no later. (Measured on validation seed 31,
the cap did not mend the shipped full model: with smoothing it collides in 11 of 60 episodes uncapped and 12
capped, against 7 without smoothing. The candidates it helps are in docs/closed_loop.md.)

The other re-timing along the same path, `follow_meta_speed`, makes a plan slow at least as its own meta
behaviour says (off by default; measured in docs/closed_loop.md, "A trajectory that follows its own meta speed").
Its mirror image, `start_on_meta`, pulls a standing ego away when its own meta says ACCELERATE and its trajectory
stays put (docs/closed_loop.md, "Pulling away when the meta says go").
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def _jerk_basis(times: np.ndarray) -> np.ndarray:
    """(K, K) contribution of a unit jerk held over interval m = [t_{m-1}, t_m] (t_{-1} = 0) to s(t_k)."""
    starts = np.concatenate([[0.0], times[:-1]])
    ends = times
    t = times[:, None]
    a = np.clip(t - starts[None], 0.0, None) ** 3
    b = np.clip(t - ends[None], 0.0, None) ** 3
    return (a - b) / 6.0


LEAD_M = 0.15  # m: the most the re-timed plan may run ahead of the decoded one (about one 0.1 m bin and a half)


def smooth_speed_profile(xy: ArrayLike, times: ArrayLike, v0: float, a0: float, weight: float,
                         lead_m: float = LEAD_M) -> np.ndarray:
    """(K, 2) positions at `times` along the same path as `xy` ((K, 2), ego frame, the ego at the origin at
    t = 0), re-timed to a jerk-penalised speed profile from speed `v0` (m/s) and longitudinal acceleration `a0`
    (m/s^2). `weight` (s^5, the jerk penalty against squared metres of arc-length error): 0 is no smoothing.
    `lead_m`: the most the re-timed plan may be ahead of the decoded one along the path, at any stamp."""
    xy = np.asarray(xy, dtype=float)
    times = np.asarray(times, dtype=float)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] != times.shape[0]:
        raise ValueError(f"smooth_speed_profile: xy must be (K, 2) with one row per time, got {xy.shape} and "
                         f"{times.shape}")
    if weight < 0 or not np.isfinite(weight):
        raise ValueError(f"smooth_speed_profile: weight must be finite and >= 0, got {weight}")
    if np.any(np.diff(times) <= 0) or times[0] <= 0:
        raise ValueError("smooth_speed_profile: times must be positive and strictly increasing")
    if weight == 0 or not np.all(np.isfinite(xy)):
        return xy
    path, seg, s_path = _arc(xy)
    total = float(s_path[-1])
    if total < 1e-6:
        return xy  # standing still: nothing to re-time
    v0 = max(0.0, float(v0))
    free = v0 * times + 0.5 * float(a0) * times ** 2
    basis = _jerk_basis(times)
    dt = np.diff(np.concatenate([[0.0], times]))
    lhs = basis.T @ basis + weight * np.diag(dt)
    jerk = np.linalg.solve(lhs, basis.T @ (s_path[1:] - free))
    if not lead_m >= 0:
        raise ValueError(f"smooth_speed_profile: lead_m must be >= 0, got {lead_m}")
    # both bounds are non-decreasing in time, so the result is too
    s_new = np.minimum(np.clip(np.maximum.accumulate(free + basis @ jerk), 0.0, total), s_path[1:] + lead_m)
    return _along(path, seg, s_path, s_new)


def _arc(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plan's polyline from the origin ((K+1, 2)), its segment lengths (K,) and arc length at each vertex (K+1,)."""
    path = np.concatenate([np.zeros((1, 2)), xy])
    seg = np.hypot(*np.diff(path, axis=0).T)
    return path, seg, np.concatenate([[0.0], np.cumsum(seg)])


def _along(path: np.ndarray, seg: np.ndarray, s_path: np.ndarray, s_new: np.ndarray) -> np.ndarray:
    """Positions at arc lengths `s_new` along the polyline `path` ((K+1, 2), from the origin); zero-length
    segments (a stopped plan) are skipped."""
    keep = np.concatenate([[True], seg > 1e-9])
    s_knots, knots = s_path[keep], path[keep]
    return np.stack([np.interp(s_new, s_knots, knots[:, 0]), np.interp(s_new, s_knots, knots[:, 1])], axis=1)


SLOWING = ("DECELERATE", "STOP")
# follow_meta_speed modes: never; whenever the meta slows; only when the plan also names a reason to slow ahead
FOLLOW_MODES = ("off", "always", "named")
REASONS_TO_SLOW = ("lead_vehicle", "lead_vehicle_braking", "pedestrian_crossing", "cyclist", "red_light", "stop_sign")


def follows_meta(mode: str, critical_objects: dict[str, bool]) -> bool:
    """Whether a plan with these critical objects is re-timed to its meta speed under `mode` (FOLLOW_MODES)."""
    if mode not in FOLLOW_MODES:
        raise ValueError(f"follow_meta_speed must be one of {', '.join(FOLLOW_MODES)}, got {mode!r}")
    return mode == "always" or (mode == "named" and any(critical_objects.get(k, False) for k in REASONS_TO_SLOW))


def follow_meta_speed(xy: ArrayLike, times: ArrayLike, v0: float, longitudinal: str, target_speed: float) -> np.ndarray:
    """(K, 2) positions along the same path as `xy`, no further along at any stamp than a constant deceleration from
    `v0` to the plan's own meta `target_speed` at the last stamp, when the meta says DECELERATE or STOP; otherwise
    `xy` unchanged. The meta's target speed is the speed it means to have at the end of the horizon (the label is
    the expert's speed 5 s on, `sim/labels.py`); a trajectory that keeps going faster than its own meta says is
    re-timed to it, never made faster. Only the plan's own outputs are read (no perception)."""
    xy = np.asarray(xy, dtype=float)
    times = np.asarray(times, dtype=float)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] != times.shape[0]:
        raise ValueError(f"follow_meta_speed: xy must be (K, 2) with one row per time, got {xy.shape} and "
                         f"{times.shape}")
    if not np.isfinite(target_speed) or target_speed < 0:
        raise ValueError(f"follow_meta_speed: target_speed must be finite and >= 0, got {target_speed}")
    v0 = max(0.0, float(v0))
    if longitudinal not in SLOWING or target_speed >= v0 or not np.all(np.isfinite(xy)):
        return xy
    horizon = float(times[-1])
    accel = (float(target_speed) - v0) / horizon
    cap = v0 * times + 0.5 * accel * times ** 2  # non-decreasing: the speed stays >= target_speed >= 0
    path, seg, s_path = _arc(xy)
    if np.all(s_path[1:] <= cap):
        return xy
    return _along(path, seg, s_path, np.minimum(s_path[1:], cap))  # both non-decreasing, so the result is too


START_STANDING_MPS = 0.5  # m/s: slower than this the ego stands (the scorer's stop-sign "stopped" speed)
START_RELEASE_MPS = 2.5  # m/s: a pull-away under way (the previous plan pulled away) goes on up to this speed
START_ACCEL = 1.0  # m/s^2: a gentle pull-away (the expert's starts from a stop line take 1-1.5)
START_SHORTFALL = 0.5  # the trajectory is frozen when it travels less than this share of the pull-away over the horizon
START_MIN_DIRECTION_M = 0.3  # m: a shorter plan has no direction of its own; the pull-away goes straight ahead


def start_on_meta(xy: ArrayLike, times: ArrayLike, v0: float, longitudinal: str, target_speed: float,
                  accel: float = START_ACCEL, standing: float = START_STANDING_MPS) -> np.ndarray:
    """(K, 2) positions that pull a standing ego away when its plan's own meta says ACCELERATE and its trajectory
    stays put; otherwise `xy` itself, the same array (so a caller can tell whether it applied).

    Applies when the ego stands (`v0` < `standing`: START_STANDING_MPS to start, START_RELEASE_MPS while a
    pull-away is under way, the caller's state), the meta is ACCELERATE to a `target_speed` above
    `v0`, and the trajectory travels less than START_SHORTFALL of the pull-away (constant `accel` from `v0` up to
    `target_speed`, then held) by the last stamp. Then each stamp goes as far along the path as the larger of the
    trajectory and the pull-away; the path is the trajectory's own polyline, extended straight on from its last
    segment when too short (straight ahead, heading 0, when the whole plan is shorter than START_MIN_DIRECTION_M).
    Only the plan's own outputs and the ego speed are read (no perception): this makes the trajectory agree with
    the decision the same plan states, the mirror image of `follow_meta_speed`."""
    xy = np.asarray(xy, dtype=float)  # a float array comes back as itself: the caller's identity test holds
    times = np.asarray(times, dtype=float)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] != times.shape[0]:
        raise ValueError(f"start_on_meta: xy must be (K, 2) with one row per time, got {xy.shape} and {times.shape}")
    if not np.isfinite(target_speed) or target_speed < 0:
        raise ValueError(f"start_on_meta: target_speed must be finite and >= 0, got {target_speed}")
    if not accel > 0:
        raise ValueError(f"start_on_meta: accel must be > 0, got {accel}")
    v0 = max(0.0, float(v0))
    if longitudinal != "ACCELERATE" or v0 >= standing or target_speed <= v0 or not np.all(np.isfinite(xy)):
        return xy
    t_reach = (float(target_speed) - v0) / accel
    ramp = np.minimum(times, t_reach)
    go = v0 * ramp + 0.5 * accel * ramp ** 2 + float(target_speed) * np.maximum(times - t_reach, 0.0)
    path, seg, s_path = _arc(xy)
    s_plan = s_path[1:]  # how far along its path the trajectory is at each stamp
    if s_path[-1] >= START_SHORTFALL * go[-1]:
        return xy
    if s_path[-1] < START_MIN_DIRECTION_M:  # no direction of its own: straight ahead
        path, seg, s_path = np.zeros((1, 2)), np.zeros(0), np.zeros(1)
        direction = np.array([1.0, 0.0])
    else:
        last = int(np.nonzero(seg > 1e-9)[0][-1])
        direction = (path[last + 1] - path[last]) / seg[last]
    reach = float(go[-1]) - float(s_path[-1]) + 1.0  # past the pull-away's last stamp
    path = np.concatenate([path, path[-1:] + reach * direction])
    seg = np.concatenate([seg, [reach]])
    s_path = np.concatenate([s_path, [s_path[-1] + reach]])
    return _along(path, seg, s_path, np.maximum(s_plan, go))  # both non-decreasing, so the result is too
