"""Random scenario of one episode, drawn deterministically from a seed.

A scenario is everything fixed before the simulation runs: the road network, the navigation
command and the ego route, and the initial state and intent of every other agent.

Kinds (probabilities): straight road (0.2), curved road (0.25), intersection with a traffic light
or a stop sign (0.4), mid-block crosswalk (0.15). Every road has 2-3 lanes in the ego direction and
1-2 oncoming lanes, 3.5 m wide.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ddrive_ros.sim.road import (
    LANE_WIDTH,
    Crosswalk,
    Road,
    RoadMap,
    Route,
    SolidDivider,
    lane_change_route,
    lane_route,
    main_reference,
    make_intersection,
    turn_route,
)
from ddrive_ros.sim.traffic_light import TrafficLightCycle

VEHICLE, PEDESTRIAN, CYCLIST = "vehicle", "pedestrian", "cyclist"
AGENT_KINDS = (VEHICLE, PEDESTRIAN, CYCLIST)

# ego geometry about base_link (rear-axle centre)
EGO_WHEELBASE = 2.8
EGO_LENGTH, EGO_WIDTH, EGO_HEIGHT = 4.6, 1.9, 1.5
EGO_REAR_OVERHANG = 0.9
EGO_CENTER_OFFSET = EGO_LENGTH / 2 - EGO_REAR_OVERHANG  # box centre ahead of base_link
EGO_FRONT = EGO_LENGTH - EGO_REAR_OVERHANG  # front bumper ahead of base_link

KIND_PROBS = {"straight": 0.2, "curve": 0.25, "intersection": 0.4, "crosswalk": 0.15}


@dataclass
class LaneAgentSpec:
    """A vehicle or cyclist that keeps to one lane and drives by IDM."""

    kind: str
    road: int
    lane: int
    s: float  # reference-line coordinate of the box centre
    v: float
    v_des: float
    lat_offset: float = 0.0  # from the lane centre, left positive
    size: tuple[float, float, float] = (4.5, 1.9, 1.5)  # length, width, height
    brake: tuple[float, float, float] | None = None  # (t_start, t_end, decel m/s^2): a braking event
    color: tuple[int, int, int] = (60, 90, 200)


@dataclass
class WalkerSpec:
    """A pedestrian walking at constant velocity in road coordinates between t_start and t_stop."""

    road: int
    s: float
    d: float
    vs: float
    vd: float
    t_start: float = 0.0
    t_stop: float = np.inf
    crosswalk: int = -1  # index of the crosswalk it crosses, -1: on the sidewalk
    size: tuple[float, float, float] = (0.5, 0.5, 1.75)


@dataclass
class EgoSpec:
    route: Route
    s0: float  # route s of base_link at t = 0
    v0: float
    v_des: float
    lane: int  # starting forward lane
    stop_target: float | None = None  # route s the front bumper stops at (STOP command)


@dataclass
class Scenario:
    seed: int
    kind: str
    road_map: RoadMap
    ego: EgoSpec
    nav_command: str
    lane_agents: list[LaneAgentSpec] = field(default_factory=list)
    walkers: list[WalkerSpec] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # route s of stop lines etc. (base: front bumper)
    crosswalk_marks: list[float] = field(default_factory=list)  # route s of each crosswalk's stop line


def _vehicle_size(rng: np.random.Generator) -> tuple[float, float, float]:
    if rng.random() < 0.15:  # truck / bus
        return (float(rng.uniform(7.0, 10.0)), 2.5, float(rng.uniform(2.8, 3.3)))
    return (float(rng.uniform(4.2, 4.9)), float(rng.uniform(1.75, 1.95)), float(rng.uniform(1.4, 1.7)))


def _vehicle_color(rng: np.random.Generator) -> tuple[int, int, int]:
    """Vehicles are blue-ish; the shade varies so that neighbouring cars stay apart."""
    base = np.array([55, 95, 205], dtype=float)
    return tuple(int(c) for c in np.clip(base * rng.uniform(0.7, 1.15) + rng.uniform(-15, 15, 3), 0, 255))


def _free_slot(rng: np.random.Generator, taken: list[tuple[float, float]], lo: float, hi: float,
               length: float, tries: int = 20, clearance: float = 6.0) -> float | None:
    """Random centre in [lo, hi] whose box keeps `clearance` to every taken (centre, length)."""
    for _ in range(tries):
        s = float(rng.uniform(lo, hi))
        if all(abs(s - c) > (length + l) / 2 + clearance for c, l in taken):
            return s
    return None


def sample_scenario(seed: int, duration_s: float = 12.0) -> Scenario:
    rng = np.random.default_rng(seed)
    kinds = list(KIND_PROBS)
    kind = str(rng.choice(kinds, p=[KIND_PROBS[k] for k in kinds]))
    n_fwd = int(rng.integers(2, 4))
    n_bwd = int(rng.integers(1, 3))
    v_limit = float(rng.uniform(9.0, 14.0))
    v0 = 0.0 if rng.random() < 0.12 else float(rng.uniform(4.0, v_limit))
    v_ref = max(v0, 5.0)

    curve = None
    if kind == "curve":
        radius = float(rng.uniform(80.0, 250.0)) * float(rng.choice([-1.0, 1.0]))
        curve = (float(rng.uniform(-20.0, 40.0)), float(rng.uniform(30.0, 0.8 * abs(radius))), 1.0 / radius)
    ref = main_reference(-150.0, 500.0, curve)
    main = Road(ref, n_fwd, n_bwd, v_limit)
    road_map = RoadMap([main])

    # navigation command and ego lane
    if kind == "intersection":
        command = str(rng.choice(["FOLLOW_LANE", "TURN_LEFT", "TURN_RIGHT"], p=[0.4, 0.3, 0.3]))
    elif kind == "crosswalk":
        command = str(rng.choice(["FOLLOW_LANE", "STOP"], p=[0.85, 0.15]))
    else:
        command = str(rng.choice(["FOLLOW_LANE", "CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT", "STOP"],
                                 p=[0.45, 0.2, 0.2, 0.15]))
    lane = int(rng.integers(0, n_fwd))
    if command == "TURN_LEFT" or command == "CHANGE_LANE_RIGHT":
        lane = 0 if command == "TURN_LEFT" else int(rng.integers(0, n_fwd - 1))
    elif command == "TURN_RIGHT":
        lane = n_fwd - 1
    elif command == "CHANGE_LANE_LEFT":
        lane = int(rng.integers(1, n_fwd))

    s_lo, s_hi = -60.0, 400.0
    if kind == "intersection":
        turning = command != "FOLLOW_LANE"
        s_int = float(np.clip(v_ref * rng.uniform(1.5, 4.5 if turning else 6.5) + 15.0, 25.0, 100.0))
        control = "light" if rng.random() < 0.6 else "stop_sign"
        light = None
        if control == "light":
            g_main, g_cross = float(rng.uniform(6.0, 12.0)), float(rng.uniform(5.0, 9.0))
            cyc = TrafficLightCycle(main_green_s=g_main, cross_green_s=g_cross)
            offset = float(rng.uniform(0.0, cyc.period_s))
            if rng.random() < (0.75 if turning else 0.5):  # often green when the ego gets there
                offset = float(np.mod(rng.uniform(0.0, g_main) - (s_int - 10.0) / v_ref, cyc.period_s))
            light = TrafficLightCycle(g_main, g_cross, offset_s=offset)
        inter, cross, cw = make_intersection(main, s_int, control, light, LANE_WIDTH, rng.random() < 0.65)
        road_map.roads.append(cross)
        road_map.intersection = inter
        if cw is not None:
            road_map.crosswalks.append(cw)
    elif kind == "crosswalk":
        s_cw = float(np.clip(v_ref * rng.uniform(1.5, 5.0) + 12.0, 18.0, 80.0))
        road_map.crosswalks.append(Crosswalk(0, s_cw, s_cw + 3.0))

    # ego route
    route: Route
    if command in ("TURN_LEFT", "TURN_RIGHT"):
        route = turn_route(main, road_map.roads[1], road_map.intersection, "left" if command == "TURN_LEFT" else "right",
                           s_lo, v_limit)
    elif command in ("CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT"):
        target = lane - 1 if command == "CHANGE_LANE_LEFT" else lane + 1
        s_start = float(v_ref * rng.uniform(0.3, 4.0) + 5.0)
        length = float(max(v_ref, 0.8 * v_limit) * rng.uniform(2.5, 4.0))
        route = lane_change_route(main, lane, target, s_start, length, s_lo, s_hi, v_limit)
        # the divider the change crosses is solid up to where the change starts, as on a real road: the start
        # is then something the cameras see, not a moment the expert picks at random
        road_map.solid_dividers.append(SolidDivider(min(lane, target), s_lo, s_start))
    else:
        route = lane_route(main, lane, s_lo, s_hi, v_limit)
    start_xy, _ = main.ref.pose_at(0.0, float(main.lane_d(lane)))
    s0 = float(route.path.project(start_xy[None])[0][0])
    v_des = float(np.clip(v_limit + rng.uniform(-1.0, 0.5), 6.0, 14.5))
    ego = EgoSpec(route, s0, v0, v_des, lane)
    if command == "STOP":
        stop_dist = max(v0 * v0 / (2.0 * 1.0), 6.0) + float(rng.uniform(5.0, 30.0))
        ego.stop_target = s0 + EGO_FRONT + stop_dist

    scenario = Scenario(seed, kind, road_map, ego, command)
    _route_marks(scenario)
    _add_vehicles(scenario, rng, duration_s)
    _add_walkers(scenario, rng, duration_s)
    return scenario


def _mark(route: Route, main: Road, s_main: float, d: float) -> float:
    pt, _ = main.ref.pose_at(s_main, d)
    return float(route.path.project(pt[None])[0][0])


def _route_marks(sc: Scenario) -> None:
    """Route s of the stop line and the intersection box, measured at the ego's lane."""
    main = sc.road_map.main
    d = float(main.lane_d(sc.ego.lane))
    inter = sc.road_map.intersection
    if inter is not None:
        sc.marks["stop_line"] = _mark(sc.ego.route, main, inter.stop_s(0, 1), d)
        sc.marks["box_entry"] = _mark(sc.ego.route, main, inter.main_box[0], d)
        if sc.ego.route.maneuver == "follow":
            sc.marks["box_exit"] = _mark(sc.ego.route, main, inter.main_box[1], d)
        else:
            sc.marks["box_exit"] = sc.ego.route.maneuver_span[1]
    for cw in sc.road_map.crosswalks:
        sc.crosswalk_marks.append(_mark(sc.ego.route, main, cw.stop_s(1), d))


def _add_vehicles(sc: Scenario, rng: np.random.Generator, duration_s: float) -> None:
    main = sc.road_map.main
    ego = sc.ego
    taken: dict[tuple[int, int], list[tuple[float, float]]] = {}
    ego_centre = EGO_CENTER_OFFSET  # main s of the ego box centre at t = 0 (base_link starts at s = 0)
    taken[(0, ego.lane)] = [(ego_centre, EGO_LENGTH + 4.0)]
    target_lane = None
    if sc.nav_command == "CHANGE_LANE_LEFT":
        target_lane = ego.lane - 1
    elif sc.nav_command == "CHANGE_LANE_RIGHT":
        target_lane = ego.lane + 1
    if target_lane is not None:  # keep the gap the ego merges into free at the start
        taken[(0, target_lane)] = [(ego_centre + 5.0, 50.0)]

    def add(kind: str, road: int, lane: int, lo: float, hi: float, v: float, v_des: float,
            size: tuple[float, float, float] | None = None, lat: float = 0.0) -> LaneAgentSpec | None:
        size = size or _vehicle_size(rng)
        lst = taken.setdefault((road, lane), [])
        s = _free_slot(rng, lst, lo, hi, size[0])
        if s is None:
            return None
        lst.append((s, size[0]))
        color = _vehicle_color(rng) if kind == VEHICLE else (200, 60, 200)
        agent = LaneAgentSpec(kind, road, lane, s, v, v_des, lat, size, None, color)
        sc.lane_agents.append(agent)
        return agent

    v0 = ego.v0
    # lead vehicle in the ego lane
    if rng.random() < 0.55:
        gap = float(rng.uniform(max(8.0, v0 * 0.8 + 4.0), 38.0))
        v_lead = float(np.clip(v0 + rng.uniform(-3.0, 2.0), 0.0, 14.0))
        lead = add(VEHICLE, 0, ego.lane, ego_centre + gap + 5.0, ego_centre + gap + 6.0, v_lead,
                   float(rng.uniform(6.0, main.speed_limit + 1.0)))
        if lead is not None and rng.random() < 0.4:
            t_b = float(rng.uniform(0.5, max(duration_s - 3.0, 1.0)))
            lead.brake = (t_b, t_b + float(rng.uniform(1.5, 3.5)), float(rng.uniform(2.0, 4.0)))
    # a follower behind the ego
    if rng.random() < 0.3:
        add(VEHICLE, 0, ego.lane, ego_centre - 28.0, ego_centre - 12.0, v0, float(rng.uniform(7.0, 13.0)))
    # other forward lanes
    for lane in range(main.n_forward):
        if lane == ego.lane:
            continue
        for _ in range(int(rng.integers(0, 3))):
            v_des = float(rng.uniform(6.0, main.speed_limit + 1.0))
            add(VEHICLE, 0, lane, ego_centre - 25.0, ego_centre + 70.0, float(np.clip(v_des + rng.uniform(-2, 1), 0, 15)),
                v_des)
    # oncoming lanes
    left_turn = sc.nav_command == "TURN_LEFT"  # sparser oncoming traffic leaves gaps to turn into
    for lane in range(main.n_forward, main.n_lanes):
        for _ in range(int(rng.integers(0, 2 if left_turn else 4))):
            v_des = float(rng.uniform(7.0, 13.0))
            add(VEHICLE, 0, lane, ego_centre + 10.0, ego_centre + 200.0, v_des, v_des)
    # a cyclist near the kerb of the right lane
    if rng.random() < 0.3:
        v_c = float(rng.uniform(3.5, 6.0))
        add(CYCLIST, 0, main.n_forward - 1, ego_centre + 12.0, ego_centre + 60.0, v_c, v_c, (1.8, 0.6, 1.7),
            lat=-1.1)
    # crossing traffic at a signalised intersection
    inter = sc.road_map.intersection
    if inter is not None and inter.control == "light":
        # crossing lane 0 drives +s (approaches from s < 0), lane 1 drives -s
        for lane, (lo, hi) in ((0, (-90.0, -12.0)), (1, (12.0, 90.0))):
            for _ in range(int(rng.integers(0, 3))):
                v_des = float(rng.uniform(4.0, 8.0))
                add(VEHICLE, 1, lane, lo, hi, v_des, v_des)


def _add_walkers(sc: Scenario, rng: np.random.Generator, duration_s: float) -> None:
    main = sc.road_map.main
    for _ in range(int(rng.integers(0, 5))):
        side = float(rng.choice([-1.0, 1.0]))
        edge = main.edge_right if side < 0 else main.edge_left
        d = edge + side * float(rng.uniform(0.8, 2.2))
        vs = 0.0 if rng.random() < 0.3 else float(rng.choice([-1.0, 1.0]) * rng.uniform(0.8, 1.6))
        sc.walkers.append(WalkerSpec(0, float(rng.uniform(-10.0, 90.0)), d, vs, 0.0))
    v_ref = max(sc.ego.v0, 3.0)
    for i, cw in enumerate(sc.road_map.crosswalks):
        if rng.random() > 0.8:
            continue
        for _ in range(int(rng.integers(1, 3))):
            from_right = rng.random() < 0.5
            speed = float(rng.uniform(1.0, 1.6))
            d_start = main.edge_right - 1.2 if from_right else main.edge_left + 1.2
            d_end = main.edge_left + 1.2 if from_right else main.edge_right - 1.2
            vd = speed if from_right else -speed
            t_arrive = (sc.crosswalk_marks[i] - sc.ego.s0 - EGO_FRONT) / v_ref
            t_start = float(np.clip(t_arrive - rng.uniform(-1.5, 4.0), 0.0, max(duration_s - 4.0, 0.0)))
            t_stop = t_start + abs(d_end - d_start) / speed
            sc.walkers.append(WalkerSpec(0, float(rng.uniform(cw.s_lo + 0.4, cw.s_hi - 0.4)), d_start, 0.0, vd,
                                         t_start, t_stop, crosswalk=i))

