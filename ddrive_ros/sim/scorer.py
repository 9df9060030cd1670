"""PDM-style scores of one driven episode, after NAVSIM's PDM score, adapted to the synthetic world.

    trace = world.trace()                      # what happened, step by step (EgoTrace)
    s = score_episode(trace, expert_progress)  # EpisodeScore: nc, dac, ep, ttc, comfort, pdms, ...

PDMS = NC x DAC x (5 EP + 5 TTC + 2 C) / 12 (NAVSIM). Every threshold is a constant below with the
reason for its value; docs/closed_loop.md repeats them. numpy only.

NC   no at-fault collision: 1, else 0 (NAVSIM gives 0.5 for static objects; this world has none).
     A collision is not the ego's fault when the ego stands (v < STOPPED_SPEED) or when the other
     road user hits it from behind (its box centre behind the ego's rear axle).
DAC  every corner of the ego box stays on a carriageway (a road strip or the intersection with its
     kerb fillets): 1, else 0.
EP   ego progress along the route / the expert's progress on the same episode, clipped to [0, 1];
     1 when the expert itself makes less than MIN_PROGRESS_M (NAVSIM's rule, so a red light or a
     STOP command does not divide by ~0).
TTC  1 unless, at some step, the ego (moving) and a road user ahead of its rear axle, both moved on
     at constant velocity and heading, would overlap within TTC_HORIZON_S (and do not overlap now).
C    nuPlan's comfort bounds on the whole driven trace (smoothed derivatives): 1 inside, else 0.

Not in PDMS, a diagnostic: `accel_swings`, how often the longitudinal acceleration (raw, 20 Hz) swings from
braking harder than SWING_ACCEL to accelerating harder than it or back. A planner that alternates go and stop
plan by plan swings at half its rate, and C can miss it: its 0.7 s smoothing window averages a 0.4 s cycle away.
The expert swings about never.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ddrive_ros.sim.road import LANE_WIDTH, RoadMap
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_FRONT, EGO_LENGTH, EGO_WIDTH

# -- thresholds -------------------------------------------------------------------------------
STOPPED_SPEED = 0.05  # m/s: an ego slower than this is standing; a collision then is not its fault
MIN_PROGRESS_M = 5.0  # m: below this expert progress EP is 1 (NAVSIM: progress_distance_threshold 5 m)
TTC_HORIZON_S = 1.0  # s: NAVSIM's time-to-collision bound
TTC_STEP_S = 0.1  # s: spacing of the constant-velocity look-ahead inside the horizon
TTC_EVERY_S = 0.1  # s: TTC is checked at 10 Hz along the trace (NAVSIM's rate)
KERB_RADIUS_M = 10.0  # m: intersection corners are rounded with this radius (a right turn's 9 m arc fits)
# nuPlan comfort bounds (nuplan-devkit ego_is_comfortable)
MIN_LON_ACCEL, MAX_LON_ACCEL = -4.05, 2.40  # m/s^2
MAX_ABS_LAT_ACCEL = 4.89  # m/s^2
MAX_ABS_YAW_RATE = 0.95  # rad/s
MAX_ABS_YAW_ACCEL = 1.93  # rad/s^2
MAX_ABS_LON_JERK = 4.13  # m/s^3
MAX_ABS_JERK = 8.37  # m/s^3 (magnitude of the jerk vector)
COMFORT_WINDOW = 15  # samples (0.7 s at 20 Hz): Savitzky-Golay window of the comfort derivatives
COMFORT_ORDER = 2  # its polynomial order; quadratic keeps a step in acceleration from reading as
#                    an unbounded jerk, which a raw 20 Hz finite difference would
ROUTE_END_TOLERANCE_M = LANE_WIDTH / 2  # route compliance: the ego ends within half a lane of the route
ROUTE_MAX_TOLERANCE_M = LANE_WIDTH  # ... and is never a full lane away from it
STOP_SIGN_STOPPED = 0.5  # m/s: an ego slower than this within STOP_SIGN_ZONE_M before the line has stopped
STOP_SIGN_ZONE_M = 5.0  # m
WEIGHTS = {"ep": 5.0, "ttc": 5.0, "comfort": 2.0}  # NAVSIM's weighted average
SWING_ACCEL = 1.5  # m/s^2: an acceleration swing goes from below -this to above +this, or back


# -- geometry ---------------------------------------------------------------------------------
def box_radius(half_len: np.ndarray, half_wid: np.ndarray, yaw: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Half the extent of an oriented box projected on a unit axis at angle `axis`."""
    rel = yaw - axis
    return half_len * np.abs(np.cos(rel)) + half_wid * np.abs(np.sin(rel))


def boxes_overlap(c1: np.ndarray, yaw1: np.ndarray, h1: np.ndarray, c2: np.ndarray, yaw2: np.ndarray,
                  h2: np.ndarray) -> np.ndarray:
    """Whether oriented boxes overlap (separating-axis test), broadcast over leading axes.

    c: (..., 2) centres, yaw: (...), h: (..., 2) half length and half width."""
    d = c2 - c1
    out = np.ones(np.broadcast_shapes(d.shape[:-1], np.shape(yaw1), np.shape(yaw2)), dtype=bool)
    for axis in (yaw1, yaw1 + np.pi / 2, yaw2, yaw2 + np.pi / 2):
        proj = np.abs(d[..., 0] * np.cos(axis) + d[..., 1] * np.sin(axis))
        reach = box_radius(h1[..., 0], h1[..., 1], yaw1, axis) + box_radius(h2[..., 0], h2[..., 1], yaw2, axis)
        out &= proj <= reach
    return out


EGO_HALF = np.array([EGO_LENGTH / 2, EGO_WIDTH / 2])


def ego_box_centre(xy: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Centre of the ego box from base_link (rear axle) poses."""
    return xy + EGO_CENTER_OFFSET * np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)


def ego_corners(xy: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(..., 4, 2) corners of the ego box."""
    c = ego_box_centre(xy, yaw)
    signs = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]], dtype=float) * EGO_HALF
    cos, sin = np.cos(yaw)[..., None], np.sin(yaw)[..., None]
    x = c[..., None, 0] + signs[:, 0] * cos - signs[:, 1] * sin
    y = c[..., None, 1] + signs[:, 0] * sin + signs[:, 1] * cos
    return np.stack([x, y], axis=-1)


def on_drivable(road_map: RoadMap, points: np.ndarray) -> np.ndarray:
    """Whether each (N, 2) point is on a carriageway: any road strip between its outer edges, or the
    rounded corners of the intersection (kerb fillets of KERB_RADIUS_M, where turns cut across)."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    ok = np.zeros(len(pts), dtype=bool)
    for road in road_map.roads:
        s, d = road.ref.project(pts)
        ok |= (d >= road.edge_right) & (d <= road.edge_left) & (s >= road.ref.s[0]) & (s <= road.ref.s[-1])
    inter = road_map.intersection
    if inter is not None and not np.all(ok):
        main = road_map.main
        s, d = main.ref.project(pts)
        r = KERB_RADIUS_M
        # the square of each corner between the two strips, minus the kerb circle's outside
        for s_edge, s_dir in ((inter.main_box[0] + 1.0, -1.0), (inter.main_box[1] - 1.0, 1.0)):
            for d_edge, d_dir in ((main.edge_right, -1.0), (main.edge_left, 1.0)):
                ds = (s - s_edge) * s_dir  # > 0: away from the crossing road along the main road
                dd = (d - d_edge) * d_dir  # > 0: beyond the main road's edge
                in_square = (ds >= 0) & (ds <= r) & (dd >= 0) & (dd <= r)
                outside_circle = np.hypot(r - ds, r - dd) >= r
                ok |= in_square & outside_circle
    return ok


# -- the trace a world hands to the scorer ----------------------------------------------------
@dataclass
class EgoTrace:
    """The scored part of one episode, at a fixed step dt (arrays over T steps; agents over A)."""

    dt: float
    ego_xy: np.ndarray  # (T, 2) base_link
    ego_yaw: np.ndarray  # (T,)
    ego_v: np.ndarray  # (T,)
    route_s: np.ndarray  # (T,) arc length of base_link along the route
    route_d: np.ndarray  # (T,) signed lateral offset from the route
    agent_xy: np.ndarray  # (A, T, 2) box centres
    agent_yaw: np.ndarray  # (A, T)
    agent_v: np.ndarray  # (A, T) speed along agent_yaw
    agent_half: np.ndarray  # (A, 2)
    agent_kind: tuple[str, ...]
    road_map: RoadMap
    light_main: np.ndarray | None = None  # (T,) 'G'/'Y'/'R' of the ego's signal, None: no light
    stop_line_s: float | None = None  # route s of the ego's stop line (front bumper), None: none
    stop_sign: bool = False  # the stop line belongs to a stop sign
    terminated: str = "duration"  # duration | collision | off_road


@dataclass
class EpisodeScore:
    nc: float
    dac: float
    ep: float
    ttc: float
    comfort: float
    pdms: float
    progress_m: float
    distance_m: float
    duration_s: float
    collisions: int
    at_fault_collisions: int
    red_light_violations: int
    stop_sign_violations: int
    route_compliance: float
    terminated: str
    comfort_fails: list[str] = field(default_factory=list)
    accel_swings: int = 0  # diagnostic, not in PDMS (accel_swings())

    def to_dict(self) -> dict:
        return asdict(self)


# -- sub-scores -------------------------------------------------------------------------------
def collisions(trace: EgoTrace) -> list[tuple[int, int, bool]]:
    """(step, agent, at_fault) of the first contact with each agent."""
    if len(trace.agent_xy) == 0:
        return []
    c = ego_box_centre(trace.ego_xy, trace.ego_yaw)  # (T, 2)
    hit = boxes_overlap(c[None], trace.ego_yaw[None], EGO_HALF, trace.agent_xy, trace.agent_yaw,
                        trace.agent_half[:, None, :])  # (A, T)
    out = []
    for a in np.flatnonzero(hit.any(axis=1)):
        k = int(np.argmax(hit[a]))
        rel = trace.agent_xy[a, k] - trace.ego_xy[k]
        lon = rel[0] * np.cos(trace.ego_yaw[k]) + rel[1] * np.sin(trace.ego_yaw[k])
        from_behind = lon < 0.0  # its centre behind the rear axle: it ran into the ego
        standing = trace.ego_v[k] < STOPPED_SPEED
        out.append((k, int(a), not (from_behind or standing)))
    return out


def no_collision(trace: EgoTrace) -> float:
    return 0.0 if any(f for _, _, f in collisions(trace)) else 1.0


def drivable_area(trace: EgoTrace) -> float:
    corners = ego_corners(trace.ego_xy, trace.ego_yaw).reshape(-1, 2)
    return 1.0 if bool(np.all(on_drivable(trace.road_map, corners))) else 0.0


def ego_progress(progress_m: float, expert_progress_m: float) -> float:
    if expert_progress_m < MIN_PROGRESS_M:
        return 1.0
    return float(np.clip(progress_m / expert_progress_m, 0.0, 1.0))


def time_to_collision(trace: EgoTrace) -> float:
    """NAVSIM's TTC: constant-velocity look-ahead of ego and agents at 10 Hz along the trace."""
    if len(trace.agent_xy) == 0:
        return 1.0
    every = max(int(round(TTC_EVERY_S / trace.dt)), 1)
    ks = np.arange(0, len(trace.ego_v), every)
    ks = ks[trace.ego_v[ks] >= STOPPED_SPEED]
    if len(ks) == 0:
        return 1.0
    taus = np.arange(TTC_STEP_S, TTC_HORIZON_S + 1e-9, TTC_STEP_S)  # (H,)
    yaw_e = trace.ego_yaw[ks]  # (K,)
    head_e = np.stack([np.cos(yaw_e), np.sin(yaw_e)], -1)
    c_e = ego_box_centre(trace.ego_xy[ks], yaw_e)  # (K, 2)
    c_e_f = c_e[:, None] + trace.ego_v[ks, None, None] * taus[None, :, None] * head_e[:, None]  # (K, H, 2)
    yaw_a = trace.agent_yaw[:, ks]  # (A, K)
    head_a = np.stack([np.cos(yaw_a), np.sin(yaw_a)], -1)
    c_a = trace.agent_xy[:, ks]  # (A, K, 2)
    c_a_f = c_a[:, :, None] + trace.agent_v[:, ks, None, None] * taus[None, None, :, None] * head_a[:, :, None]
    half_a = trace.agent_half[:, None, None, :]
    future = boxes_overlap(c_e_f[None], yaw_e[None, :, None], EGO_HALF, c_a_f, yaw_a[:, :, None], half_a)
    now = boxes_overlap(c_e[None], yaw_e[None], EGO_HALF, c_a, yaw_a, trace.agent_half[:, None, :])  # (A, K)
    rel = c_a - trace.ego_xy[ks][None]
    ahead = (rel[..., 0] * head_e[None, :, 0] + rel[..., 1] * head_e[None, :, 1]) > 0.0  # ahead of the rear axle
    bad = future.any(axis=2) & ~now & ahead
    return 0.0 if bool(bad.any()) else 1.0


def savgol_derivative(y: np.ndarray, dt: float, deriv: int, window: int = COMFORT_WINDOW,
                      order: int = COMFORT_ORDER) -> np.ndarray:
    """Derivative of a sampled signal by local polynomial least squares (Savitzky-Golay), with the
    window shifted inwards at the ends instead of padding."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < 3:
        return np.zeros(n)
    w = min(window, n if n % 2 else n - 1)
    p = min(order, w - 1)
    if deriv > p:
        return np.zeros(n)
    x = np.arange(w, dtype=float)
    vander = np.vander(x, p + 1, increasing=True)  # (w, p+1)
    pinv = np.linalg.pinv(vander)  # (p+1, w): polynomial coefficients from window values
    # derivative of sum_j c_j x^j at each window position x_i, as weights on the window values
    dpow = np.zeros((w, p + 1))
    for j in range(deriv, p + 1):
        dpow[:, j] = np.prod(np.arange(j - deriv + 1, j + 1)) * x ** (j - deriv)
    weights = dpow @ pinv  # (w, w)
    starts = np.clip(np.arange(n) - w // 2, 0, n - w)
    windows = sliding_window_view(y, w)[starts]  # (n, w)
    return np.einsum("nw,nw->n", weights[np.arange(n) - starts], windows) / dt ** deriv


def comfort(trace: EgoTrace) -> tuple[float, list[str]]:
    """1 if the trace is inside every nuPlan bound, else 0 and the names of the bounds broken."""
    dt = trace.dt
    v = trace.ego_v
    yaw = np.unwrap(trace.ego_yaw)
    lon_acc = savgol_derivative(v, dt, 1)
    yaw_rate = savgol_derivative(yaw, dt, 1)
    yaw_acc = savgol_derivative(yaw, dt, 2)
    lat_acc = v * yaw_rate
    lon_jerk = savgol_derivative(lon_acc, dt, 1)
    lat_jerk = savgol_derivative(lat_acc, dt, 1)
    checks = {
        "lon_accel": bool(np.all((lon_acc >= MIN_LON_ACCEL) & (lon_acc <= MAX_LON_ACCEL))),
        "lat_accel": bool(np.all(np.abs(lat_acc) <= MAX_ABS_LAT_ACCEL)),
        "yaw_rate": bool(np.all(np.abs(yaw_rate) <= MAX_ABS_YAW_RATE)),
        "yaw_accel": bool(np.all(np.abs(yaw_acc) <= MAX_ABS_YAW_ACCEL)),
        "lon_jerk": bool(np.all(np.abs(lon_jerk) <= MAX_ABS_LON_JERK)),
        "jerk": bool(np.all(np.hypot(lon_jerk, lat_jerk) <= MAX_ABS_JERK)),
    }
    fails = [k for k, ok in checks.items() if not ok]
    return (0.0 if fails else 1.0), fails


def accel_swings(ego_v: np.ndarray, dt: float, threshold: float = SWING_ACCEL) -> int:
    """Swings of the raw longitudinal acceleration between below -threshold and above +threshold (hysteresis:
    values in between keep the last side)."""
    a = np.diff(np.asarray(ego_v, dtype=float)) / dt
    side = np.where(a > threshold, 1, np.where(a < -threshold, -1, 0))
    side = side[side != 0]
    return int(np.count_nonzero(side[1:] != side[:-1])) if len(side) > 1 else 0


def light_violations(trace: EgoTrace) -> tuple[int, int]:
    """(red-light, stop-sign) violations: the front bumper crossing the stop line on red, or
    crossing a stop sign's line without having stopped within STOP_SIGN_ZONE_M before it."""
    if trace.stop_line_s is None or len(trace.route_s) < 2:
        return 0, 0
    front = trace.route_s + EGO_FRONT
    line = trace.stop_line_s
    crossed = np.flatnonzero((front[:-1] < line) & (front[1:] >= line)) + 1
    if len(crossed) == 0:
        return 0, 0
    k = int(crossed[0])
    if trace.stop_sign:
        zone = (front[:k] >= line - STOP_SIGN_ZONE_M) & (trace.ego_v[:k] < STOP_SIGN_STOPPED)
        return 0, 0 if bool(zone.any()) else 1
    if trace.light_main is not None and trace.light_main[k] == "R":
        return 1, 0
    return 0, 0


def route_compliance(trace: EgoTrace) -> float:
    d = np.abs(trace.route_d)
    return 1.0 if (d[-1] <= ROUTE_END_TOLERANCE_M and d.max() <= ROUTE_MAX_TOLERANCE_M) else 0.0


def pdms(nc: float, dac: float, ep: float, ttc: float, c: float) -> float:
    w = WEIGHTS
    return nc * dac * (w["ep"] * ep + w["ttc"] * ttc + w["comfort"] * c) / sum(w.values())


def score_episode(trace: EgoTrace, expert_progress_m: float) -> EpisodeScore:
    hits = collisions(trace)
    nc = 0.0 if any(f for _, _, f in hits) else 1.0
    dac = drivable_area(trace)
    progress = float(trace.route_s[-1] - trace.route_s[0])
    ep = ego_progress(progress, expert_progress_m)
    ttc = time_to_collision(trace)
    c, fails = comfort(trace)
    red, stop = light_violations(trace)
    step_len = np.linalg.norm(np.diff(trace.ego_xy, axis=0), axis=1)
    return EpisodeScore(
        nc=nc, dac=dac, ep=ep, ttc=ttc, comfort=c, pdms=pdms(nc, dac, ep, ttc, c), progress_m=progress,
        distance_m=float(step_len.sum()), duration_s=float((len(trace.ego_v) - 1) * trace.dt),
        collisions=len(hits), at_fault_collisions=sum(f for _, _, f in hits), red_light_violations=red,
        stop_sign_violations=stop, route_compliance=route_compliance(trace), terminated=trace.terminated,
        comfort_fails=fails, accel_swings=accel_swings(trace.ego_v, trace.dt))


def aggregate(method: str, scores: list[EpisodeScore]) -> dict:
    """One table row: means of the per-episode sub-scores, events per km over all driven km."""
    km = sum(s.distance_m for s in scores) / 1000.0
    hours = sum(s.duration_s for s in scores) / 3600.0
    mean = lambda k: float(np.mean([getattr(s, k) for s in scores])) if scores else float("nan")  # noqa: E731
    per_km = lambda n: float(n / km) if km > 0 else float("nan")  # noqa: E731
    return {
        "method": method,
        "pdms": mean("pdms"), "nc": mean("nc"), "dac": mean("dac"), "ep": mean("ep"), "ttc": mean("ttc"),
        "comfort": mean("comfort"),
        "red_light_per_km": per_km(sum(s.red_light_violations for s in scores)),
        "stop_sign_per_km": per_km(sum(s.stop_sign_violations for s in scores)),
        "route_compliance": mean("route_compliance"),
        "collisions_per_km": per_km(sum(s.collisions for s in scores)),
        "at_fault_collisions_per_km": per_km(sum(s.at_fault_collisions for s in scores)),
        "mean_speed_mps": float(km * 1000.0 / (hours * 3600.0)) if hours > 0 else float("nan"),
        "accel_swings_per_min": float(sum(s.accel_swings for s in scores) / (hours * 60.0)) if hours > 0 else float("nan"),
        "km": km,
        "episodes": len(scores),
    }
