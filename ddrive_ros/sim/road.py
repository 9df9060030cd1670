"""Road network of one episode: a main road, an optional crossing road, the intersection between
them, crosswalks, and the ego route through it all.

Conventions: each road has a reference line (its centre divider). Lanes driving along +s lie to its
right (negative lateral offset d), lanes driving along -s to its left, as in right-hand traffic.
Forward lanes are numbered 0 (next to the divider) .. n_forward-1 (kerb side).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ddrive_ros.sim.polyline import Polyline
from ddrive_ros.sim.traffic_light import TrafficLightCycle

LANE_WIDTH = 3.5
SIDEWALK_WIDTH = 2.5
RIGHT_TURN_RADIUS = 9.0
LEFT_TURN_RADIUS = 10.0


@dataclass(frozen=True)
class Road:
    ref: Polyline
    n_forward: int
    n_backward: int
    speed_limit: float

    @property
    def n_lanes(self) -> int:
        return self.n_forward + self.n_backward

    @property
    def edge_right(self) -> float:
        return -self.n_forward * LANE_WIDTH

    @property
    def edge_left(self) -> float:
        return self.n_backward * LANE_WIDTH

    def lane_d(self, lane: int | np.ndarray) -> np.ndarray:
        lane = np.asarray(lane)
        return np.where(lane < self.n_forward, -(lane + 0.5) * LANE_WIDTH,
                        (lane - self.n_forward + 0.5) * LANE_WIDTH)

    def lane_dir(self, lane: int | np.ndarray) -> np.ndarray:
        return np.where(np.asarray(lane) < self.n_forward, 1, -1)

    def forward_lane_at(self, d: float) -> int:
        """Nearest forward lane to a lateral offset."""
        return int(np.clip(np.floor(-d / LANE_WIDTH), 0, self.n_forward - 1))


@dataclass(frozen=True)
class Crosswalk:
    road: int
    s_lo: float
    s_hi: float

    def stop_s(self, direction: int, margin: float = 1.0) -> float:
        """Where a vehicle driving in `direction` stops to let pedestrians cross."""
        return self.s_lo - margin if direction > 0 else self.s_hi + margin


@dataclass(frozen=True)
class Intersection:
    s_main: float  # centre on the main-road reference
    control: str  # "light" | "stop_sign"
    light: TrafficLightCycle | None
    main_box: tuple[float, float]  # occupied main-road s range
    cross_box: tuple[float, float]  # occupied crossing-road s range
    main_stop: tuple[float, float]  # stop line s for main-road traffic driving +s / -s
    cross_stop: tuple[float, float]  # the same on the crossing road

    def stop_s(self, road: int, direction: int) -> float:
        lines = self.main_stop if road == 0 else self.cross_stop
        return lines[0] if direction > 0 else lines[1]

    def box(self, road: int) -> tuple[float, float]:
        return self.main_box if road == 0 else self.cross_box


@dataclass(frozen=True)
class SolidDivider:
    """A stretch of a lane divider painted solid (no lane change across it) where the road's
    dividers are otherwise dashed: main-road lanes `lane` and `lane + 1` (forward lanes, numbered
    from the centre line) between main-road s `s_lo` and `s_hi`."""
    lane: int
    s_lo: float
    s_hi: float

    @property
    def d(self) -> float:
        return -(self.lane + 1) * LANE_WIDTH


@dataclass
class RoadMap:
    roads: list[Road]
    intersection: Intersection | None = None
    crosswalks: list[Crosswalk] = field(default_factory=list)
    solid_dividers: list[SolidDivider] = field(default_factory=list)

    @property
    def main(self) -> Road:
        return self.roads[0]


def smoothstep5(u: np.ndarray) -> np.ndarray:
    """Quintic 0 -> 1 with zero slope and curvature at both ends (a lane-change profile)."""
    u = np.clip(u, 0.0, 1.0)
    return u ** 3 * (10.0 - 15.0 * u + 6.0 * u * u)


def main_reference(s_lo: float, s_hi: float, curve: tuple[float, float, float] | None,
                   step: float = 0.5) -> Polyline:
    """Main-road reference line through the origin heading +x at s = 0.

    `curve` = (s_start, length, curvature): a constant-curvature arc with 15 m clothoid ramps.
    """
    s = np.arange(s_lo, s_hi + 1e-9, step)
    kappa = np.zeros_like(s)
    if curve is not None:
        s_c, length, k = curve
        ramp = 15.0
        up = np.clip((s - s_c) / ramp, 0.0, 1.0)
        down = np.clip((s_c + ramp + length + ramp - s) / ramp, 0.0, 1.0)
        kappa = k * np.minimum(up, down)
    return Polyline.from_curvature(s, kappa)


def make_intersection(main: Road, s_int: float, control: str, light: TrafficLightCycle | None,
                      cross_half_width: float, crosswalk: bool) -> tuple[Intersection, Road, Crosswalk | None]:
    """Crossing road perpendicular to a straight stretch of the main road at s_int.

    The crossing reference runs along the main road's left normal, s = 0 on the main reference.
    """
    centre, heading = main.ref.pose_at(s_int)
    cross_heading = float(heading) + np.pi / 2
    s = np.arange(-160.0, 160.0 + 1e-9, 0.5)
    cross_ref = Polyline.from_curvature(s, np.zeros_like(s), float(centre[0]), float(centre[1]), cross_heading)
    lanes = int(round(cross_half_width / LANE_WIDTH))
    cross = Road(cross_ref, lanes, lanes, speed_limit=7.0)
    main_box = (s_int - cross_half_width - 1.0, s_int + cross_half_width + 1.0)
    cross_box = (main.edge_right - 1.0, main.edge_left + 1.0)
    cw = Crosswalk(0, main_box[0] - 3.5, main_box[0] - 0.5) if crosswalk else None
    near_stop = (cw.s_lo - 1.0) if cw else main_box[0] - 1.5
    inter = Intersection(
        s_main=s_int, control=control, light=light, main_box=main_box, cross_box=cross_box,
        main_stop=(near_stop, main_box[1] + 1.5), cross_stop=(cross_box[0] - 1.5, cross_box[1] + 1.5))
    return inter, cross, cw


@dataclass(frozen=True)
class Route:
    """The path the ego expert tracks, with a speed limit per vertex and where its manoeuvre lies."""

    path: Polyline
    speed_limit: np.ndarray  # (N,) m/s
    maneuver: str  # "follow" | "left_turn" | "right_turn" | "change_left" | "change_right"
    maneuver_span: tuple[float, float] = (np.inf, np.inf)  # route s where the manoeuvre happens
    leaves_main_at: float = np.inf  # route s after which the ego is no longer on the main road
    target_d: float | None = None  # a lane change's target lane centre, main-road d (None: no lane change)

    def speed_limit_at(self, s: np.ndarray | float) -> np.ndarray:
        return np.interp(s, self.path.s, self.speed_limit)


def lane_route(main: Road, lane: int, s_lo: float, s_hi: float, v_limit: float) -> Route:
    pts, _ = main.ref.pose_at(np.arange(s_lo, s_hi + 1e-9, 0.5), float(main.lane_d(lane)))
    path = Polyline.from_points(pts)
    return Route(path, np.full(len(path.s), v_limit), "follow")


def lane_change_route(main: Road, lane_from: int, lane_to: int, s_start: float, length: float,
                      s_lo: float, s_hi: float, v_limit: float) -> Route:
    s = np.arange(s_lo, s_hi + 1e-9, 0.5)
    d0, d1 = float(main.lane_d(lane_from)), float(main.lane_d(lane_to))
    d = d0 + (d1 - d0) * smoothstep5((s - s_start) / length)
    pts, _ = main.ref.pose_at(s, d)
    path = Polyline.from_points(pts)
    ends, _ = main.ref.pose_at(np.array([s_start, s_start + length]), np.array([d0, d1]))
    s_ends, _ = path.project(ends)
    span = (float(s_ends[0]), float(s_ends[1]))
    maneuver = "change_left" if lane_to < lane_from else "change_right"
    return Route(path, np.full(len(path.s), v_limit), maneuver, span, target_d=d1)


def turn_route(main: Road, cross: Road, inter: Intersection, direction: str, s_lo: float,
               v_limit: float) -> Route:
    """Lane -> quarter circle -> crossing-road lane. Right turns start from the kerb lane onto the
    near crossing lane, left turns from lane 0 onto the far one."""
    _, heading = main.ref.pose_at(inter.s_main)
    t_hat = np.array([np.cos(heading), np.sin(heading)])
    n_hat = np.array([-t_hat[1], t_hat[0]])
    cross_half = cross.n_forward * LANE_WIDTH
    if direction == "right":
        lane, radius, s_lane, exit_dir = main.n_forward - 1, RIGHT_TURN_RADIUS, inter.s_main - cross_half / 2, -1.0
    else:
        lane, radius, s_lane, exit_dir = 0, LEFT_TURN_RADIUS, inter.s_main + cross_half / 2, 1.0
    d_lane = float(main.lane_d(lane))
    corner, _ = main.ref.pose_at(s_lane, d_lane)
    t1 = corner - t_hat * radius
    centre = t1 + exit_dir * n_hat * radius
    start_ang = np.arctan2(*(t1 - centre)[::-1])
    sweep = np.pi / 2 * exit_dir  # right: clockwise, left: counter-clockwise
    n_arc = int(np.ceil(abs(sweep) * radius / 0.5))
    ang = start_ang + sweep * np.linspace(0.0, 1.0, n_arc + 1)
    arc = centre + radius * np.stack([np.cos(ang), np.sin(ang)], axis=1)
    s_t1 = s_lane - radius
    approach, _ = main.ref.pose_at(np.arange(s_lo, s_t1, 0.5), d_lane)
    exit_pts = arc[-1] + exit_dir * n_hat * np.arange(0.5, 160.0, 0.5)[:, None]
    path = Polyline.from_points(np.concatenate([approach, arc, exit_pts]))
    s_arc_start = float(path.project(t1[None])[0][0])
    s_arc_end = s_arc_start + abs(sweep) * radius
    limit = np.where(path.s < s_arc_start, v_limit, cross.speed_limit)
    return Route(path, limit, f"{direction}_turn", (s_arc_start, s_arc_end), s_arc_end)
