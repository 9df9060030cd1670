"""The safety check of a plan and the local search for a safe anchor (numpy only).

A plan is K waypoints (x forward, y left, metres) of base_link (the rear axle) in the ego frame at
t0, at strictly increasing times > 0; the ego is at the origin heading +x with speed `v0` at t = 0.

Kinematics are finite differences on the polyline origin -> waypoint 0 -> ... -> waypoint K-1:
segment i (ending at waypoint i) has velocity chord / dt, placed at the segment's mid time; the
speed at t = 0 is v0. Acceleration is the change of segment speed between consecutive mid times
(the first against v0 at t = 0), jerk the change of that acceleration, and the lateral acceleration
is the mean speed times the change of segment heading (the first against heading 0 at t = 0), i.e.
v^2 * curvature. Every quantity is attributed to the waypoint ending its latest segment: that is
the waypoint (hence the tokens) whose position makes the value what it is.

Road users are oriented boxes moved at constant speed and yaw rate (`predict`: straight at constant velocity
when the yaw rate is 0; the turn is capped at MAX_PREDICTED_TURN); the ego box (ego_length x ego_width,
centred `ego_center_offset` ahead of base_link) takes the path heading at each waypoint. A road user
that first comes near a plan from behind (at the first waypoint the check flags it: centre behind the
rear axle, faster along the ego's heading) is that plan's follower and is left out at every waypoint,
as in the closed-loop scorer, which judges a contact where it starts: a vehicle running into the ego
from behind is not the plan's fault, and its straight-line prediction passing on through the ego box
(a follower braking or bending with its lane does not) is no reason to brake.
Road users are judged at the waypoints up to `Limits.road_user_horizon_s` (2 s by default: predictions further out are
guesses the next plan revises); the plan's own kinematics, its meta and the corridor at every waypoint.
Collisions are tested at the waypoints. The time to collision from each waypoint (the ego box moving
on at its arriving velocity, that of the segment ending there, the others at theirs, headings kept;
solved exactly per box axis) covers the gaps between them. Clearance is the largest separating gap
over the four box axes, a lower bound of the true distance, so the check errs towards flagging.

Vectorised over a batch of candidate plans (`_assess`), so that `search_anchor` scores a few
hundred candidates in one pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# one rule over a batch of C plans: kind, excess and flags (C, K, R), and the road user of each of the
# R columns (-1: not about a road user)
Record = tuple[str, np.ndarray, np.ndarray, np.ndarray]
NONE = np.array([-1])


@dataclass(frozen=True)
class Obstacle:
    """A road user's box in the ego frame at t0: centre, heading, size, velocity (ego frame, m/s) and yaw rate
    (rad/s, counter-clockwise: a road user bending with its lane; `predict`)."""

    x: float
    y: float
    yaw: float
    length: float
    width: float
    vx: float = 0.0
    vy: float = 0.0
    yaw_rate: float = 0.0


@dataclass(frozen=True, eq=False)
class Corridor:
    """The drivable corridor: points within `half_width` of a polyline (ego frame). A point past either
    end of the centreline counts by its distance to that end."""

    centerline: np.ndarray  # (M >= 2, 2)
    half_width: float

    def __post_init__(self) -> None:
        c = np.asarray(self.centerline, dtype=float)
        if c.ndim != 2 or c.shape[1] != 2 or len(c) < 2:
            raise ValueError(f"corridor centerline must be (M >= 2, 2), got {c.shape}")
        object.__setattr__(self, "centerline", c)


@dataclass(frozen=True)
class Limits:
    """Thresholds of the check: a passenger car in urban traffic."""

    max_speed: float = 20.0  # m/s (72 km/h), segment speed
    max_accel: float = 3.0  # m/s^2, longitudinal speed-up
    max_decel: float = 6.0  # m/s^2, longitudinal braking (firm, short of an emergency stop ~8-9)
    max_jerk: float = 10.0  # m/s^3, |change of longitudinal acceleration|
    max_lateral_accel: float = 4.0  # m/s^2, v^2 * curvature (the curvature limit at the plan's speed)
    min_clearance_m: float = 0.3  # m, gap kept to every road user's box
    min_ttc_s: float = 1.0  # s, time to collision at constant velocities, from each waypoint
    stop_tolerance_m: float = 1.5  # m, a STOP plan may still roll this far over its last `stop_window_s`
    stop_window_s: float = 1.0  # s
    lateral_tolerance_m: float = 1.0  # m, a LEFT_* plan may end this far right (and mirror) before it is flagged
    # the manoeuvre rule, off (None) unless asked for (SafetyReflect asks when it may resample: MANOEUVRE_LIMITS)
    change_min_m: float | None = None  # m, a *_CHANGE plan must end at least this far to its side, along the road
    turn_min_deg: float | None = None  # deg, a *_TURN plan must end heading at least this far to its side
    # deg, with a corridor: a lane change whose ego already heads this far to its side (against the corridor) is
    # under way and is not judged (how far it has come is not known without the lanes; the label flips to STRAIGHT
    # for the last 2 m of a change, so a rule asking for 1 m more there pushes the car past the target lane)
    change_underway_deg: float | None = None
    min_move_m: float = 0.25  # m, a shorter segment is standing still: its heading is held from the one before
    # the following rule, off (None) unless asked for: at every waypoint the ego must be able to stop behind a road
    # user in its path that brakes at `follow_decel` from there, braking no harder itself, `follow_gap_m` short of it
    follow_decel: float | None = None  # m/s^2
    follow_gap_m: float = 2.0  # m, gap left standing
    # s, the road-user rules (collision, TTC, clearance, following) judge the waypoints up to this time only; None:
    # all of them. A road user's prediction at constant speed and yaw rate is a guess that grows worse with time, and
    # the plan is made again next tick from a newer sighting. Judged over the whole 5 s plan, the node's setting braked
    # for conflicts 3.5-5 s ahead that never came (oncoming cars, crossing cars slowing for their line, leads); up to
    # 2 s (TTC reaching 1 s past it: 3 s of look-ahead, 60 m at 20 m/s against a 33 m stop at max_decel) validation
    # PDMS +0.014 (SE 0.005), progress +0.023, no at-fault collision in 360 episodes (docs/reflection.md, "A horizon
    # for road users")
    road_user_horizon_s: float | None = 2.0


# The manoeuvre rule's thresholds: the label calls a lane change from 2 m of offset and a turn from 30 deg of heading
# change relative to the road, over 5 s (sim/labels.py); half of each leaves room for a 4 s horizon and a slower
# manoeuvre, and still catches a plan that goes straight on (0 m, 0 deg)
MANOEUVRE_LIMITS = {"change_min_m": 1.0, "turn_min_deg": 15.0, "change_underway_deg": 2.0}


@dataclass(frozen=True)
class SafetyContext:
    """What a plan is checked against: the ego speed at t0, the road users, the drivable corridor."""

    v0: float
    obstacles: tuple[Obstacle, ...] = ()
    corridor: Corridor | None = None
    limits: Limits = Limits()
    ego_length: float = 4.6
    ego_width: float = 1.9
    ego_center_offset: float = 1.4  # m, box centre ahead of base_link (the waypoints' point)


@dataclass(frozen=True)
class Violation:
    """One broken rule: `waypoints` are the 0-based indices responsible, the first offending first;
    `severity` >= 0 is the worst excess over the limit in the kind's unit (see UNITS)."""

    kind: str
    waypoints: tuple[int, ...]
    severity: float
    message: str
    obstacle: int = -1  # the road user's index in the context's obstacles; -1: not about a road user


UNITS = {
    "collision": "m of box overlap",
    "ttc": "s short of min_ttc_s",
    "corridor": "m outside the corridor",
    "clearance": "m short of min_clearance_m",
    "following": "m short of the gap to stop behind a road user in the path at follow_decel",
    "meta": "m (STOP: rolled past the tolerance; turn/change: to the wrong side past the tolerance)",
    "manoeuvre": "m (lane change: offset at the end, along the road) or rad (turn: heading at the end) short of "
                 "the manoeuvre the plan's meta names",
    "speed": "m/s over max_speed",
    "accel": "m/s^2 over max_accel",
    "decel": "m/s^2 over max_decel",
    "curvature": "m/s^2 of lateral acceleration over max_lateral_accel",
    "jerk": "m/s^3 over max_jerk",
}
# Ranking weights. A violation costs weight * (1 + s / (1 + s)) for severity s: between 1x and 2x its
# weight, growing with severity. A single violation of a tier outweighs one of any lower tier at any
# severity, and clearance alone outweighs all meta and kinematic violations together (at most 202).
WEIGHTS = {
    "collision": 3000.0,  # per road user hit
    "ttc": 1000.0,  # per road user
    "corridor": 1000.0,  # leaving the drivable area
    "clearance": 300.0,  # per road user
    "following": 300.0,  # per road user: a stop behind it would need harder braking than follow_decel
    "meta": 30.0,  # the plan contradicts its own meta behaviour (STOP, and turn/change side: up to 2)
    "manoeuvre": 30.0,  # the meta names a lane change or turn the plan does not make (the meta tier)
    "speed": 10.0,
    "accel": 10.0,
    "decel": 10.0,
    "curvature": 10.0,
    "jerk": 1.0,  # comfort only
}


# the kinds a moved waypoint can mend. A manoeuvre not made is not one: moving one waypoint sideways makes a
# kink, not a lane change or a turn; SafetyReflect resamples the trajectory for it instead (decoding/reflect.py)
ANCHORED = frozenset(WEIGHTS) - {"manoeuvre"}
# the kinds about a road user: what a slow-down along the plan's path (search_brake) is for
ROAD_USER_KINDS = frozenset({"collision", "ttc", "clearance", "following"})


def cost(violations: list[Violation]) -> float:
    """One scalar to rank plans: 0 when safe, else the weighted sum over violations (see WEIGHTS)."""
    return float(sum(WEIGHTS.get(v.kind, 1.0) * (1.0 + v.severity / (1.0 + v.severity)) for v in violations))


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2.0 * np.pi) - np.pi


def _validate(waypoints: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(times, dtype=float).reshape(-1)
    p = np.asarray(waypoints, dtype=float)
    if p.shape[-2:] != (len(t), 2) or len(t) < 1:
        raise ValueError(f"waypoints must be (K, 2) with K = len(times) >= 1, got {p.shape} and {t.shape}")
    if t[0] <= 0.0 or np.any(np.diff(t) <= 0.0):
        raise ValueError(f"times must be positive and strictly increasing, got {t}")
    return p, t


def _motion(P: np.ndarray, t: np.ndarray, v0: float, lim: Limits) -> dict[str, np.ndarray]:
    """Finite-difference kinematics of a batch of plans P (C, K, 2)."""
    C, K = P.shape[:2]
    chord = P - np.concatenate([np.zeros((C, 1, 2)), P[:, :-1]], axis=1)  # segment i ends at waypoint i
    t_prev = np.concatenate([[0.0], t[:-1]])
    vel = chord / (t - t_prev)[None, :, None]
    speed = np.hypot(vel[..., 0], vel[..., 1])
    mid = np.concatenate([[0.0], 0.5 * (t + t_prev)])  # t = 0 (v0, heading 0), then segment mid times
    moving = np.hypot(chord[..., 0], chord[..., 1]) >= lim.min_move_m
    heading = np.concatenate([np.zeros((C, 1)), np.arctan2(chord[..., 1], chord[..., 0])], axis=1)
    valid = np.concatenate([np.ones((C, 1), bool), moving], axis=1)
    last = np.maximum.accumulate(np.where(valid, np.arange(K + 1), 0), axis=1)
    heading = np.take_along_axis(heading, last, axis=1)  # (C, K+1), held while standing
    spd = np.concatenate([np.full((C, 1), float(v0)), speed], axis=1)
    dm = np.diff(mid)
    accel = np.diff(spd, axis=1) / dm  # (C, K) at the mid times of consecutive samples
    tau = 0.5 * (mid[1:] + mid[:-1])
    jerk = np.diff(accel, axis=1) / np.diff(tau) if K > 1 else np.zeros((C, 0))  # (C, K-1): waypoints 1..K-1
    lat = np.abs(_wrap(np.diff(heading, axis=1)) / dm) * 0.5 * (spd[:, 1:] + spd[:, :-1])
    seg = heading[:, 1:]
    nxt = np.concatenate([seg[:, 1:], seg[:, -1:]], axis=1)
    yaw = seg + 0.5 * _wrap(nxt - seg)  # waypoint heading: between the segments either side
    return {"chord": chord, "vel": vel, "speed": speed, "accel": accel, "jerk": jerk, "lat": lat, "yaw": yaw}


def _kinematic_records(m: dict[str, np.ndarray], lim: Limits) -> list[Record]:
    C = m["speed"].shape[0]
    jerk = np.concatenate([np.zeros((C, 1)), np.abs(m["jerk"])], axis=1)
    out = []
    for kind, value, limit in (("speed", m["speed"], lim.max_speed), ("accel", m["accel"], lim.max_accel),
                               ("decel", -m["accel"], lim.max_decel), ("jerk", jerk, lim.max_jerk),
                               ("curvature", m["lat"], lim.max_lateral_accel)):
        flags = value > limit
        out.append((kind, np.where(flags, value - limit, 0.0)[..., None], flags[..., None], NONE))
    return out


def _heading_at_origin(line: np.ndarray) -> float:
    """Heading (rad, ego frame) of the polyline's segment nearest the origin: the road's direction where the ego
    is, so the ego's heading against the road is minus this."""
    a, ab = line[:-1], np.diff(line, axis=0)
    u = np.clip(-np.einsum("ij,ij->i", a, ab) / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12), 0.0, 1.0)
    j = int(np.argmin(np.hypot(*(a + u[:, None] * ab).T)))
    return float(np.arctan2(ab[j, 1], ab[j, 0]))


def _polyline_offset(points: np.ndarray, line: np.ndarray) -> np.ndarray:
    """Signed distance (left positive) of points (..., 2) to the nearest point of a polyline (M, 2)."""
    q = points.reshape(-1, 2)
    a, ab = line[:-1], np.diff(line, axis=0)
    # only segments near the points matter: drop those whose both ends are far outside their bounding box
    lo, hi = q.min(axis=0), q.max(axis=0)
    reach = np.hypot(ab[:, 0], ab[:, 1]).max() + 50.0
    near = np.all((np.minimum(a, a + ab) < hi + reach) & (np.maximum(a, a + ab) > lo - reach), axis=1)
    if near.any():
        a, ab = a[near], ab[near]
    len2 = np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12)
    ap = q[:, None, :] - a[None]
    u = np.clip(np.einsum("nmj,mj->nm", ap, ab) / len2, 0.0, 1.0)
    diff = ap - u[..., None] * ab[None]
    dist2 = np.einsum("nmj,nmj->nm", diff, diff)
    j = np.argmin(dist2, axis=1)
    rows = np.arange(len(q))
    cross = ab[j, 0] * ap[rows, j, 1] - ab[j, 1] * ap[rows, j, 0]
    return (np.where(cross < 0.0, -1.0, 1.0) * np.sqrt(dist2[rows, j])).reshape(points.shape[:-1])


def _meta_records(P: np.ndarray, t: np.ndarray, m: dict[str, np.ndarray], ctx: SafetyContext,
                  longitudinal: str | None, lateral: str | None) -> list[Record]:
    lim, out = ctx.limits, []
    if longitudinal == "STOP":
        window = t > t[-1] - lim.stop_window_s + 1e-9
        length = np.hypot(m["chord"][..., 0], m["chord"][..., 1])
        roll = np.sum(np.where(window, length, 0.0), axis=1, keepdims=True)
        flags = window & (length > 0.05) & (roll > lim.stop_tolerance_m)
        out.append(("meta", np.where(flags, roll - lim.stop_tolerance_m, 0.0)[..., None], flags[..., None], NONE))
    if lateral in ("LEFT_TURN", "RIGHT_TURN", "LEFT_CHANGE", "RIGHT_CHANGE"):
        sign = 1.0 if lateral.startswith("LEFT") else -1.0
        if lateral.endswith("CHANGE") and ctx.corridor is not None:  # lanes are measured along the road
            line = ctx.corridor.centerline
            offset = _polyline_offset(P, line) - _polyline_offset(np.zeros((1, 2)), line)[0]
        else:  # a turn leaves the road's direction: measure in the ego frame
            offset = P[..., 1]
        wrong = -sign * offset - lim.lateral_tolerance_m
        flags = (wrong > 0.0) & (wrong[:, -1:] > 0.0)  # judged by where the plan ends
        out.append(("meta", np.where(flags, wrong, 0.0)[..., None], flags[..., None], NONE))
        # the manoeuvre must be made, not only not undone: judged at the plan's end; to the wrong side is "meta" alone
        change = lateral.endswith("CHANGE")
        need = lim.change_min_m if change else lim.turn_min_deg
        underway = (change and ctx.corridor is not None and lim.change_underway_deg is not None
                    and -sign * _heading_at_origin(ctx.corridor.centerline) > np.radians(lim.change_underway_deg))
        if need is not None and not underway:
            short = (need - sign * offset[:, -1:]) if change else (np.radians(need) - sign * m["yaw"][:, -1:])
            flags = np.zeros(offset.shape, bool)
            flags[:, -1:] = (short > 0.0) & ~(wrong[:, -1:] > 0.0)
            out.append(("manoeuvre", np.where(flags, short, 0.0)[..., None], flags[..., None], NONE))
    return out


def _box_axes(yaw1: np.ndarray, h1: np.ndarray, yaw2: np.ndarray, h2: np.ndarray) -> list[tuple]:
    """The four separating axes of two oriented boxes (h: half length/width) and, on each, the sum
    of both boxes' half extents: (axis x, axis y, reach)."""
    c1, s1, c2, s2 = np.cos(yaw1), np.sin(yaw1), np.cos(yaw2), np.sin(yaw2)
    ca, sa = np.abs(c1 * c2 + s1 * s2), np.abs(s2 * c1 - c2 * s1)
    return [(c1, s1, h1[..., 0] + h2[..., 0] * ca + h2[..., 1] * sa),
            (-s1, c1, h1[..., 1] + h2[..., 0] * sa + h2[..., 1] * ca),
            (c2, s2, h2[..., 0] + h1[..., 0] * ca + h1[..., 1] * sa),
            (-s2, c2, h2[..., 1] + h1[..., 0] * sa + h1[..., 1] * ca)]


def _separation(d: np.ndarray, axes: list[tuple]) -> np.ndarray:
    """Signed gap between the boxes (d = centre2 - centre1): the largest separation over the axes;
    negative where they overlap (minus the penetration depth)."""
    gaps = [np.abs(d[..., 0] * ax + d[..., 1] * ay) - r for ax, ay, r in axes]
    return np.maximum(np.maximum(gaps[0], gaps[1]), np.maximum(gaps[2], gaps[3]))


def _contact_time(d: np.ndarray, v: np.ndarray, axes: list[tuple]) -> np.ndarray:
    """First time >= 0 the boxes overlap when box 2 moves at v relative to box 1, both keeping their
    headings (exact: on each axis the overlap is a time interval; SAT overlap is their intersection);
    inf when never."""
    lo, hi = np.zeros(d.shape[:-1]), np.full(d.shape[:-1], np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for ax, ay, r in axes:
            p, q = d[..., 0] * ax + d[..., 1] * ay, v[..., 0] * ax + v[..., 1] * ay
            still = np.abs(q) < 1e-12
            t1, t2 = (-r - p) / q, (r - p) / q
            inside = np.abs(p) <= r
            lo = np.maximum(lo, np.where(still, np.where(inside, -np.inf, np.inf), np.minimum(t1, t2)))
            hi = np.minimum(hi, np.where(still, np.where(inside, np.inf, -np.inf), np.maximum(t1, t2)))
    return np.where(lo <= hi, lo, np.inf)


MAX_PREDICTED_TURN = np.pi / 2  # rad: a road user's predicted heading change, a turn and not a circle


def predict(obstacles: tuple[Obstacle, ...] | list[Obstacle], t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centres (K, N, 2), velocities (K, N, 2) and headings (K, N) of the road users at times t (K,) from t0: constant
    speed and yaw rate, the velocity turning with the heading until it has turned MAX_PREDICTED_TURN, straight on
    from there. With yaw rate 0 this is constant velocity. A car on a curve keeps to its curve instead of running
    on along its tangent: an oncoming car on a left bend is not heading into the ego's lane."""
    t = np.asarray(t, dtype=float)
    ob = np.array([[o.x, o.y, o.yaw, o.vx, o.vy, o.yaw_rate] for o in obstacles], dtype=float).reshape(-1, 6)
    p0, yaw0, v0, w = ob[:, 0:2], ob[:, 2], ob[:, 3:5], ob[:, 5]
    with np.errstate(divide="ignore", invalid="ignore"):
        t_turn = np.where(w != 0.0, MAX_PREDICTED_TURN / np.abs(w), np.inf)  # (N,) when the turn stops
    te = np.minimum(t[:, None], t_turn[None])  # (K, N) time spent turning
    th = w[None] * te  # (K, N) heading change
    # the turning part: the integral of the rotated velocity, (1/w) [[sin th, cos th - 1], [1 - cos th, sin th]] v0,
    # written with sinc so that w -> 0 is straight driving
    a = te * np.sinc(th / np.pi)  # sin(th) / w
    b = te * (th / 2.0) * np.sinc(th / (2.0 * np.pi)) ** 2  # (1 - cos th) / w
    vx, vy = v0[None, :, 0], v0[None, :, 1]
    turned = np.stack([a * vx - b * vy, b * vx + a * vy], axis=-1)
    c, s_ = np.cos(th), np.sin(th)
    vel = np.stack([c * vx - s_ * vy, s_ * vx + c * vy], axis=-1)  # (K, N, 2)
    xy = p0[None] + turned + (t[:, None] - te)[..., None] * vel
    return xy, vel, yaw0[None] + th


def _followers(behind: np.ndarray, flagged: np.ndarray, kq: np.ndarray, col: np.ndarray, n: int) -> np.ndarray:
    """(C, Q): the pair's road user is the plan's follower, `behind` at the first waypoint where it is `flagged` in
    that plan (both (C, Q) over the pairs of waypoint kq and road user column col)."""
    follower = np.zeros((flagged.shape[0], n), bool)
    for j in range(n):
        cols = col == j
        k, f = kq[cols][None], flagged[:, cols]
        first = np.where(f, k, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
        follower[:, j] = (f & (k == first) & behind[:, cols]).any(axis=1)
    return follower[:, col]


def _obstacle_records(P: np.ndarray, t: np.ndarray, m: dict[str, np.ndarray], ctx: SafetyContext) -> list[Record]:
    if not ctx.obstacles:
        return []
    lim = ctx.limits
    C, K = P.shape[:2]
    o_half = np.array([[o.length / 2, o.width / 2] for o in ctx.obstacles], dtype=float)
    o_xy, o_vel, o_yaw = predict(ctx.obstacles, t)  # (K, N, 2), (K, N, 2), (K, N) at the waypoint times
    yaw = m["yaw"]
    head = np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)
    e_xy = P + ctx.ego_center_offset * head  # (C, K, 2) box centres
    e_half = np.array([ctx.ego_length / 2, ctx.ego_width / 2])
    reach = np.hypot(*e_half) + np.hypot(o_half[:, 0], o_half[:, 1])  # (N,) bounding circles
    # the (waypoint, road user) pairs any plan of the batch may come close to: bounding circles against
    # the box around the batch's ego centres at that waypoint, widened by the closing distance
    lo, hi = e_xy.min(axis=0)[:, None], e_xy.max(axis=0)[:, None]
    out_box = np.maximum(np.maximum(lo - o_xy, o_xy - hi), 0.0)
    v_max = np.hypot(m["vel"][..., 0], m["vel"][..., 1]).max(axis=0)
    span = np.maximum(lim.min_clearance_m, (v_max[:, None] + np.hypot(o_vel[..., 0], o_vel[..., 1])) * lim.min_ttc_s)
    # the following rule looks as far ahead as a stop takes: over every pair, before the pruning below
    follow = (_following_record(e_xy, yaw, m["speed"], o_xy, o_vel, o_yaw, o_half, e_half, lim, t)
              if lim.follow_decel is not None else [])
    near = np.hypot(out_box[..., 0], out_box[..., 1]) - reach[None] < span
    if lim.road_user_horizon_s is not None:
        near &= (t <= lim.road_user_horizon_s)[:, None]
    kq, nq = np.nonzero(near)
    if not len(kq):
        return follow
    # per pair q, for every plan c: arrays (C, Q)
    d = o_xy[kq, nq][None] - e_xy[:, kq]
    yq, hx, hy = yaw[:, kq], head[:, kq, 0], head[:, kq, 1]
    gap0 = np.hypot(d[..., 0], d[..., 1]) - reach[nq]
    rel_v = o_vel[kq, nq][None] - m["vel"][:, kq]
    sep = np.full(gap0.shape, np.inf)
    ci, qi = np.nonzero(gap0 < lim.min_clearance_m)
    if len(ci):
        n = nq[qi]
        sep[ci, qi] = _separation(d[ci, qi], _box_axes(yq[ci, qi], e_half, o_yaw[kq[qi], n], o_half[n]))
    hit = sep < 0.0
    tight = (sep >= 0.0) & (sep < lim.min_clearance_m)
    contact = np.full(gap0.shape, np.inf)
    ci, qi = np.nonzero(~hit & (gap0 < np.hypot(rel_v[..., 0], rel_v[..., 1]) * lim.min_ttc_s))
    if len(ci):  # not hit now, but close enough to be reached within min_ttc_s
        n = nq[qi]
        contact[ci, qi] = _contact_time(d[ci, qi], rel_v[ci, qi], _box_axes(yq[ci, qi], e_half, o_yaw[kq[qi], n],
                                                                            o_half[n]))
    ttc_flags = contact <= lim.min_ttc_s
    ttc_short = lim.min_ttc_s - contact
    # not a follower: a road user whose first flagged waypoint of a plan finds its centre behind the rear axle and
    # faster along the ego's heading is left out of that plan at every waypoint (the scorer judges a contact where
    # it starts; the follower's straight-line prediction runs on through the ego box, its lane and brakes do not)
    lon = (d[..., 0] + ctx.ego_center_offset * hx) * hx + (d[..., 1] + ctx.ego_center_offset * hy) * hy
    behind = (lon < 0.0) & (rel_v[..., 0] * hx + rel_v[..., 1] * hy > 0.0)
    who, col = np.unique(nq, return_inverse=True)  # one column per road user near the plans
    ahead = ~_followers(behind, hit | tight | ttc_flags, kq, col, len(who))
    hit, tight, ttc_flags = hit & ahead, tight & ahead, ttc_flags & ahead
    out: list[Record] = list(follow)
    for kind, flags, excess in (("collision", hit, -sep), ("clearance", tight, lim.min_clearance_m - sep),
                                ("ttc", ttc_flags, ttc_short)):
        if flags.any():
            f, e = np.zeros((C, K, len(who)), bool), np.zeros((C, K, len(who)))
            f[:, kq, col] = flags
            e[:, kq, col] = np.where(flags, excess, 0.0)
            out.append((kind, e, f, who))
    return out


def _following_record(e_xy: np.ndarray, yaw: np.ndarray, speed: np.ndarray, o_xy: np.ndarray, o_vel: np.ndarray,
                      o_yaw: np.ndarray, o_half: np.ndarray, e_half: np.ndarray, lim: Limits,
                      t: np.ndarray) -> list[Record]:
    """The following rule over every (plan, waypoint, road user): a road user is in the path at waypoint k when its
    box, at its place then, lies ahead of the ego box along the ego's heading and overlaps it sideways; then the gap
    between the boxes must hold the difference of the two stopping distances at `follow_decel` (the ego at its
    segment speed, the road user at its speed along the ego's heading, none when it comes towards the ego) plus
    `follow_gap_m`: if it braked that hard from there, the ego could stop behind it braking no harder."""
    b = float(lim.follow_decel)
    if b <= 0:
        raise ValueError(f"follow_decel must be > 0 m/s^2, got {b}")
    hx, hy = np.cos(yaw)[..., None], np.sin(yaw)[..., None]  # (C, K, 1)
    d = o_xy[None] - e_xy[:, :, None]  # (C, K, N, 2)
    lon = d[..., 0] * hx + d[..., 1] * hy
    lat = -d[..., 0] * hy + d[..., 1] * hx
    rel = o_yaw[None] - yaw[..., None]  # the road user's heading against the ego's (o_yaw (K, N))
    c, s_ = np.abs(np.cos(rel)), np.abs(np.sin(rel))
    ext_lon = o_half[:, 0] * c + o_half[:, 1] * s_  # its half extent along the ego's heading
    ext_lat = o_half[:, 0] * s_ + o_half[:, 1] * c
    gap = lon - e_half[0] - ext_lon
    in_path = (lon > 0.0) & (np.abs(lat) < e_half[1] + ext_lat) & (gap > -e_half[0])
    v_lead = np.maximum(o_vel[None, ..., 0] * hx + o_vel[None, ..., 1] * hy, 0.0)  # o_vel (K, N, 2)
    v_ego = speed[..., None]
    need = np.maximum(v_ego ** 2 - v_lead ** 2, 0.0) / (2.0 * b) + lim.follow_gap_m
    short = need - np.maximum(gap, 0.0)
    flags = in_path & (short > 0.0)
    if lim.road_user_horizon_s is not None:
        flags &= (t <= lim.road_user_horizon_s)[None, :, None]
    if not flags.any():
        return []
    who = np.flatnonzero(flags.any(axis=(0, 1)))
    return [("following", np.where(flags, short, 0.0)[..., who], flags[..., who], who)]


def _corridor_records(P: np.ndarray, m: dict[str, np.ndarray], ctx: SafetyContext) -> list[Record]:
    if ctx.corridor is None:
        return []
    yaw = m["yaw"]
    centre = P + ctx.ego_center_offset * np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)
    allowed = ctx.corridor.half_width - ctx.ego_width / 2
    excess = np.abs(_polyline_offset(centre, ctx.corridor.centerline)) - allowed
    flags = excess > 0.0
    return [("corridor", np.where(flags, excess, 0.0)[..., None], flags[..., None], NONE)]


def _assess(P: np.ndarray, t: np.ndarray, ctx: SafetyContext, longitudinal: str | None,
            lateral: str | None) -> list[Record]:
    """Every rule over a batch of plans P (C, K, 2): records with per-waypoint excess and flags."""
    m = _motion(P, t, ctx.v0, ctx.limits)
    return (_kinematic_records(m, ctx.limits) + _meta_records(P, t, m, ctx, longitudinal, lateral)
            + _obstacle_records(P, t, m, ctx) + _corridor_records(P, m, ctx))


def _batch_cost(records: list[Record], C: int) -> np.ndarray:
    """`cost` of each plan of a batch, from its records (the same sum `cost(check(...))` gives)."""
    total = np.zeros(C)
    for kind, excess, flags, _ in records:
        sev = excess.max(axis=1)  # (C, R)
        total += np.where(flags.any(axis=1), WEIGHTS.get(kind, 1.0) * (1.0 + sev / (1.0 + sev)), 0.0).sum(axis=1)
    return total


def _message(kind: str, obstacle: int, sev: float, idx: tuple[int, ...], t: np.ndarray) -> str:
    who = f" (obstacle {obstacle})" if obstacle >= 0 else ""
    return f"{kind}{who} from t={t[idx[0]]:.2f} s at waypoints {list(idx)}: {sev:.2f} {UNITS[kind]}"


def check(waypoints: np.ndarray, times: np.ndarray, context: SafetyContext, longitudinal: str | None = None,
          lateral: str | None = None) -> list[Violation]:
    """The violations of a plan, most costly first (ties: earliest first); [] when it is safe.

    `longitudinal` / `lateral` are the plan's meta behaviour (plan.py's MetaBehavior values); None
    skips the consistency rules."""
    p, t = _validate(waypoints, times)
    out = []
    for kind, excess, flags, who in _assess(p[None], t, context, longitudinal, lateral):
        for r, obstacle in enumerate(who):
            idx = tuple(int(i) for i in np.flatnonzero(flags[0, :, r]))
            if idx:
                sev = float(excess[0, :, r].max())
                out.append(Violation(kind, idx, sev, _message(kind, int(obstacle), sev, idx, t), int(obstacle)))
    out.sort(key=lambda v: (-WEIGHTS.get(v.kind, 1.0), v.waypoints[0]))
    return out


def road_user_cost(waypoints: np.ndarray, times: np.ndarray, context: SafetyContext) -> float:
    """What a plan costs by the rules about the world outside the ego: road users (ROAD_USER_KINDS) and the
    drivable corridor. Its own kinematics and meta are left out: a re-timing that a caller makes on purpose
    (a pull-away, speed_smoothing.start_on_meta) is judged by what it meets, not by how it moves."""
    return cost([v for v in check(waypoints, times, context) if v.kind in ROAD_USER_KINDS or v.kind == "corridor"])


def _repair_batch(p: np.ndarray, k: int, anchors: np.ndarray) -> np.ndarray:
    """`repair` for many anchors (C, 2) of one plan p (K, 2): plans (C, K, 2)."""
    line = np.concatenate([np.zeros((1, 2)), p])  # origin, then the waypoints; waypoint j is line[j + 1]
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    s += np.arange(len(s)) * 1e-9  # strictly increasing through standing segments, for np.interp
    start, seg = line[k], line[k + 1] - line[k]
    seg_len = float(np.hypot(*seg))
    out = np.repeat(p[None], len(anchors), axis=0)
    if seg_len < 1e-6:  # standing before k: no progress to scale, move the tail rigidly
        out[:, k:] += (anchors - p[k])[:, None]
        return out
    u = seg / seg_len
    rho = (anchors - start) @ u / seg_len  # progress of the anchor as a fraction of the segment
    lateral = anchors - start - np.outer(rho * seg_len, u)
    at = s[k] + np.maximum(rho, 0.0)[:, None] * (s[None, k + 1:] - s[k])  # (C, K-k)
    pts = np.stack([np.interp(at, s, line[:, 0]), np.interp(at, s, line[:, 1])], axis=-1)
    last = line[-1] - line[-2]
    last_dir = last / max(float(np.hypot(*last)), 1e-9)
    pts += np.maximum(at - s[-1], 0.0)[..., None] * last_dir  # straight on past the last waypoint
    out[:, k:] = pts + lateral[:, None]
    out[:, k] = anchors
    return out


def repair(waypoints: np.ndarray, k: int, new_xy: np.ndarray) -> np.ndarray:
    """The plan with waypoint k pinned at `new_xy` and the later waypoints adjusted plausibly.

    The anchor is split against the segment into waypoint k (from waypoint k-1, or the origin) into
    progress along it, a fraction rho of its length, and a sideways offset. Every later waypoint's
    progress past waypoint k-1 along the plan's path is scaled by the same rho (a slower anchor slows
    the rest of the plan instead of catching up: what clears a road user ahead; the path is extended
    straight past its end when rho > 1) and it takes the same sideways offset (the rest of the path
    keeps its shape beside the old one: what a dodge or a corridor fix needs). Earlier waypoints stay.
    This is the trajectory `search_anchor` scores; decoding inpaints the other tokens instead.
    """
    p = np.asarray(waypoints, dtype=float)
    return _repair_batch(p, int(k), np.asarray(new_xy, dtype=float).reshape(1, 2))[0]


def search_anchor(waypoints: np.ndarray, times: np.ndarray, context: SafetyContext, violation: Violation,
                  longitudinal: str | None = None, lateral: str | None = None,
                  step_xy: tuple[float, float] = (0.1, 0.1),
                  radius_steps: tuple[int, ...] = (1, 3, 10, 30)) -> tuple[int, np.ndarray] | None:
    """A safer position for the earliest offending waypoint k of `violation`, or None.

    Candidate anchors for waypoint k, all rounded to the token grid (multiples of `step_xy`):
      * a multi-scale grid around it: (i dx, j dy) for i, j in {0, +-radius_steps} (80 shifts of
        0.1, 0.3, 1 and 3 m per axis by default);
      * slow-downs: pulled back along its segment to fractions 0, 0.05, .., 0.95 of it (0 stops at
        waypoint k-1), which is what clears most collisions and short times to collision.
    Without a drivable corridor in the context only the slow-downs are tried: a sideways move cannot be checked
    against the road (on 164 validation episodes a road-user-only check that could move sideways avoided 9 at-fault
    collisions and left the road in 15 more episodes; docs/reflection.md, "With the road users and no map").
    Each candidate is scored as the trajectory `repair` makes of it, by `cost(check(...))` in one
    vectorised pass; the lowest cost wins, ties going to the smallest displacement of waypoint k.
    Returns (k, new_xy) when the winner costs less than the plan as it is. 100 candidates: ~2.5 ms
    for 10 waypoints and 10 road users all near the plan, ~1.5 ms for one, measured as CPU time on a
    shared, loaded core (the finer grid (1, 2, 4, 8, 16, 30), 188 candidates, takes about twice that).
    """
    p, t = _validate(waypoints, times)
    if not violation.waypoints or violation.kind not in ANCHORED:
        return None
    k = int(violation.waypoints[0])
    step = np.asarray(step_xy, dtype=float)
    r = np.unique(np.concatenate([[0], radius_steps, -np.asarray(radius_steps)])).astype(float)
    gx, gy = np.meshgrid(r * step[0], r * step[1], indexing="ij")
    offsets = np.stack([gx.ravel(), gy.ravel()], axis=1)
    start = p[k - 1] if k > 0 else np.zeros(2)
    slow = start + np.linspace(0.0, 0.95, 20)[:, None] * (p[k] - start)
    grid = p[k] + offsets[np.any(offsets != 0.0, axis=1)] if context.corridor is not None else np.zeros((0, 2))
    anchors = np.concatenate([grid, slow])
    anchors = np.round(anchors / step) * step
    cand = np.concatenate([p[None], _repair_batch(p, k, anchors)])  # the plan as it is first: the baseline
    costs = _batch_cost(_assess(cand, t, context, longitudinal, lateral), len(cand))
    base, costs = costs[0], costs[1:]
    moved = np.hypot(*(anchors - p[k]).T)
    best = np.lexsort((moved, np.round(costs, 9)))[0]
    if costs[best] >= base - 1e-9:
        return None
    return k, anchors[best].copy()


def brake_distance(v0: float, t: np.ndarray, decel: float, jerk: float, decel0: float = 0.0) -> np.ndarray:
    """Distance travelled at times t >= 0 by a vehicle at v0 braking at `decel0` at t = 0 (0: not braking) whose
    deceleration then moves to `decel` at `jerk` (m/s^3) and holds until it stands (and it stands from then on);
    integrated on a 10 ms grid."""
    t = np.asarray(t, dtype=float)
    dt = 0.01
    grid = np.arange(0.0, float(t.max(initial=0.0)) + 2 * dt, dt)
    step = np.clip(jerk * grid, 0.0, abs(decel - decel0))
    a = decel0 + np.sign(decel - decel0) * step
    v = np.maximum(float(v0) - np.concatenate([[0.0], np.cumsum(0.5 * (a[1:] + a[:-1]) * dt)]), 0.0)
    d = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * dt)])
    return np.interp(t, grid, d)


BRAKE_DECELS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)  # m/s^2, gentlest first
BRAKE_JERKS = (2.5, 10.0)  # m/s^3: a gentle ramp, under the comfort bound's 4.13, and a hard one for emergencies


def search_brake(waypoints: np.ndarray, times: np.ndarray, context: SafetyContext, longitudinal: str | None = None,
                 lateral: str | None = None, decels: tuple[float, ...] = BRAKE_DECELS,
                 jerks: tuple[float, ...] = BRAKE_JERKS) -> np.ndarray | None:
    """A slow-down of the whole plan along its own path, or None: the plan re-timed so that it brakes from now,
    its deceleration moving from the plan's own at the start (its first waypoint's, if it brakes) to one of `decels`
    at one of `jerks`, held until it stands, never ahead of where the plan itself would be. Each is scored by
    `cost(check(...))` in one pass; the lowest cost wins, ties going to the gentlest (lowest deceleration, then
    jerk). Returns the new waypoints (K, 2) when the winner costs less than the plan as it is.

    Unlike `search_anchor`, which moves the earliest offending waypoint and so squeezes the slow-down into the
    segment before it (a road user found 3 s ahead became a stop within half a second), this starts braking at once,
    as gently as the road users allow."""
    p, t = _validate(waypoints, times)
    line = np.concatenate([np.zeros((1, 2)), p])
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    s += np.arange(len(s)) * 1e-9  # strictly increasing through standing segments, for np.interp
    own = s[1:]
    decel0 = float(np.clip(-_motion(p[None], t, context.v0, context.limits)["accel"][0, 0], 0.0, max(decels)))
    cand = []
    for a in decels:
        for j in jerks:
            at = np.minimum(brake_distance(context.v0, t, a, j, decel0), own)
            cand.append(np.stack([np.interp(at, s, line[:, 0]), np.interp(at, s, line[:, 1])], axis=-1))
    batch = np.concatenate([p[None], np.stack(cand)])
    costs = _batch_cost(_assess(batch, t, context, longitudinal, lateral), len(batch))
    base, costs = costs[0], costs[1:]
    best = int(np.argmin(np.round(costs, 9)))  # the first of the lowest: the gentlest
    if costs[best] >= base - 1e-9:
        return None
    return cand[best]

