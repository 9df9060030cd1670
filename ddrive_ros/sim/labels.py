"""Labels of the structured plan, computed from the simulated scene and the expert's future.

Critical objects (scene at t0; x, y in the ego frame at t0, base_link):

| name                 | true when                                                                        |
|----------------------|----------------------------------------------------------------------------------|
| lead_vehicle         | a vehicle in the ego's path (within 1.75 m of the route, heading within 60 deg)  |
|                      | whose rear is 0..40 m ahead of the ego's front bumper                            |
| lead_vehicle_braking | lead_vehicle and its mean acceleration over the last 0.5 s < -1.0 m/s^2          |
| pedestrian_crossing  | a pedestrian on a carriageway with 0 < x <= 40 m, |y| <= 15 m                     |
| pedestrian_near_road | a pedestrian off the carriageway but within 2.5 m of it, 0 < x <= 40, |y| <= 20   |
| cyclist              | a cyclist with 0 < x <= 40 m, |y| <= 10 m                                         |
| vehicle_left_lane    | a vehicle in the same-direction lane left of the ego's, -10..+30 m along the road|
| vehicle_right_lane   | the same for the lane to the right                                               |
| oncoming_vehicle     | a vehicle heading > 135 deg away from the ego with 0 < x <= 60 m, |y| <= 15 m    |
| red_light            | the ego's signal shows red and its stop line is 0..60 m ahead (yellow: neither)  |
| green_light          | the ego's signal shows green and its stop line is 0..60 m ahead                  |
| stop_sign            | a stop sign governs the ego's approach and its stop line is 0..50 m ahead        |
| intersection_ahead   | the intersection is entered within 60 m, or the ego is inside it                 |

Future meta behaviour (expert's own future over 5 s; v0, v5 = speed at t0 and t0 + 5 s):

| field        | rule                                                                                   |
|--------------|----------------------------------------------------------------------------------------|
| longitudinal | STOP if v5 < 0.5 m/s and the ego moves < 0.5 m in the last second; else ACCELERATE if  |
|              | v5 - v0 > +1.0 m/s; DECELERATE if v5 - v0 < -1.0 m/s; else KEEP                        |
| lateral      | heading change relative to the road (ego yaw change minus the main road's heading       |
|              | change over the same stretch, so following a curve is not a turn): > +30 deg LEFT_TURN, |
|              | < -30 deg RIGHT_TURN; otherwise the change of the ego's lateral offset from the road    |
|              | centre line: > +2 m LEFT_CHANGE, < -2 m RIGHT_CHANGE; else STRAIGHT                     |
| target_speed | v5 clipped to [0, 99.9] m/s, rounded to 0.1                                            |
| turn_signal  | LEFT for LEFT_TURN / LEFT_CHANGE, RIGHT for RIGHT_TURN / RIGHT_CHANGE, else OFF          |

Explanation: one or two sentences from the expert's binding constraint at t0 (its `Reason`) and the
meta behaviour, in the words of config/schema/words.txt only, tokens separated by spaces.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ddrive_ros.sim.expert import Reason
from ddrive_ros.sim.scenario import CYCLIST, EGO_FRONT, EGO_REAR_OVERHANG, PEDESTRIAN, VEHICLE
from ddrive_ros.sim.traffic_light import GREEN, RED
from ddrive_ros.plan import MetaBehavior
from ddrive_ros.sample import label_schema
from ddrive_ros.sim.world import SIM_DT
from ddrive_ros.timeline import FUTURE_HORIZON_S
from ddrive_ros.trajectory import wrap_angle, world_to_ego

# names and lengths come from the label schema (config/schema/fast_ddrive.yaml), never copied here
CRITICAL_OBJECTS: tuple[str, ...] = tuple(f.name for f in label_schema().section("critical_objects").fields)
MAX_EXPLANATION_TOKENS = label_schema().section("explanation").fields[0].length
HORIZON_STEPS = int(round(FUTURE_HORIZON_S / SIM_DT))  # labels look this far ahead (the plan horizon)


@dataclass(frozen=True)
class LabelThresholds:
    lead_range_m: float = 40.0
    lead_lateral_m: float = 1.75
    lead_braking_accel: float = -1.0
    braking_window_s: float = 0.5
    pedestrian_range_m: float = 40.0
    pedestrian_lateral_m: float = 15.0
    near_road_m: float = 2.5
    near_road_lateral_m: float = 20.0
    cyclist_range_m: float = 40.0
    cyclist_lateral_m: float = 10.0
    adjacent_behind_m: float = 10.0
    adjacent_ahead_m: float = 30.0
    oncoming_range_m: float = 60.0
    oncoming_lateral_m: float = 15.0
    oncoming_heading_deg: float = 135.0
    light_range_m: float = 60.0
    stop_sign_range_m: float = 50.0
    intersection_range_m: float = 60.0
    stop_speed: float = 0.5
    stop_last_second_m: float = 0.5
    speed_change: float = 1.0
    turn_heading_deg: float = 30.0
    change_offset_m: float = 2.0


THRESHOLDS = LabelThresholds()


# -- vocabulary -------------------------------------------------------------------------------
def load_words() -> frozenset[str]:
    """The explanation vocabulary of the label schema (config/schema/words.txt)."""
    return frozenset(label_schema().words)


def unknown_words(text: str, words: frozenset[str] | None = None) -> list[str]:
    vocab = words if words is not None else load_words()
    return [w for w in text.split() if w not in vocab]


# -- critical objects -------------------------------------------------------------------------
def lead_vehicle(ep, k: int, th: LabelThresholds = THRESHOLDS) -> tuple[int, float]:
    """The lead vehicle at step k: its agent index and the gap (m) from the ego's front bumper to its rear along the
    route, or (-1, nan) when there is none (the `lead_vehicle` label's rule)."""
    veh = np.flatnonzero(ep.agent_kind == VEHICLE)
    if not len(veh):
        return -1, float("nan")
    route = ep.scenario.ego.route
    s_e = ep.ego_s[k]
    s_a, l_a = route.path.project(ep.agent_xy[veh, k], s_e - 5.0, s_e + th.lead_range_m + 20.0)
    rel = wrap_angle(ep.agent_yaw[veh, k] - route.path.heading_at(s_a))
    gap = s_a - ep.agent_size[veh, 0] / 2 - (s_e + EGO_FRONT)
    ok = (np.abs(l_a) < th.lead_lateral_m) & (np.cos(rel) > 0.5) & (gap > -1.0) & (gap <= th.lead_range_m)
    if not ok.any():
        return -1, float("nan")
    i = np.flatnonzero(ok)[np.argmin(gap[ok])]
    return int(veh[i]), float(gap[i])


def _mean_accel(ep, a: int, k: int, window_s: float) -> float:
    n = max(int(round(window_s / ep.dt)), 1)
    k0 = max(k - n, 0)
    if k == k0:
        return float(ep.agent_accel[a, k])
    return float((ep.agent_v[a, k] - ep.agent_v[a, k0]) / ((k - k0) * ep.dt))


def _front_gap(ep, k: int, mark: str) -> float:
    return float(ep.scenario.marks[mark] - (ep.ego_s[k] + EGO_FRONT))


def critical_objects(ep, k: int, th: LabelThresholds = THRESHOLDS) -> dict[str, bool]:
    sc = ep.scenario
    main = sc.road_map.main
    out = dict.fromkeys(CRITICAL_OBJECTS, False)
    kind = ep.agent_kind
    if ep.n_agents:
        rel = world_to_ego(ep.agent_xy[:, k], ep.ego_xy[k], ep.ego_yaw[k])
        x, y = rel[:, 0], rel[:, 1]
    else:
        x = y = np.zeros(0)
    lead, _ = lead_vehicle(ep, k, th)
    out["lead_vehicle"] = lead >= 0
    out["lead_vehicle_braking"] = lead >= 0 and _mean_accel(ep, lead, k, th.braking_window_s) < th.lead_braking_accel
    ped = kind == PEDESTRIAN
    on_road = ep.agent_on_road[:, k]
    out["pedestrian_crossing"] = bool(np.any(ped & on_road & (x > 0) & (x <= th.pedestrian_range_m)
                                             & (np.abs(y) <= th.pedestrian_lateral_m)))
    if np.any(ped):
        dist = np.full(ep.n_agents, np.inf)
        for road in sc.road_map.roads:
            s, d = road.ref.project(ep.agent_xy[:, k])
            inside_s = (s > road.ref.s[0]) & (s < road.ref.s[-1])
            off = np.maximum(road.edge_right - d, d - road.edge_left)
            dist = np.where(inside_s, np.minimum(dist, off), dist)
        out["pedestrian_near_road"] = bool(np.any(ped & ~on_road & (dist <= th.near_road_m) & (x > 0)
                                                  & (x <= th.pedestrian_range_m) & (np.abs(y) <= th.near_road_lateral_m)))
    out["cyclist"] = bool(np.any((kind == CYCLIST) & (x > 0) & (x <= th.cyclist_range_m)
                                 & (np.abs(y) <= th.cyclist_lateral_m)))
    veh = kind == VEHICLE
    if ep.n_agents:
        heading_diff = np.abs(wrap_angle(ep.agent_yaw[:, k] - ep.ego_yaw[k]))
        out["oncoming_vehicle"] = bool(np.any(veh & (heading_diff > np.radians(th.oncoming_heading_deg)) & (x > 0)
                                              & (x <= th.oncoming_range_m) & (np.abs(y) <= th.oncoming_lateral_m)))
    # adjacent lanes: only while the ego drives along the main road
    s_e, d_e = ep.ego_main_sd[k]
    on_main = ep.ego_s[k] < sc.ego.route.maneuver_span[0] if sc.ego.route.maneuver.endswith("turn") else True
    if on_main and main.edge_right < d_e < 0 and np.any(veh):
        ego_lane = main.forward_lane_at(d_e)
        cand = np.flatnonzero(veh & (ep.agent_road == 0))
        s_a, _ = main.ref.project(ep.agent_xy[cand, k], s_e - 40.0, s_e + 60.0)
        ds = s_a - s_e
        near = (ds >= -th.adjacent_behind_m) & (ds <= th.adjacent_ahead_m)
        lanes = ep.agent_lane[cand]
        out["vehicle_left_lane"] = bool(ego_lane > 0 and np.any(near & (lanes == ego_lane - 1)))
        out["vehicle_right_lane"] = bool(ego_lane < main.n_forward - 1 and np.any(near & (lanes == ego_lane + 1)))
    inter = sc.road_map.intersection
    if inter is not None:
        to_line = _front_gap(ep, k, "stop_line")
        if inter.control == "light":
            state = ep.light_state(k, 0)
            ahead = -0.3 < to_line <= th.light_range_m
            out["red_light"] = ahead and state == RED
            out["green_light"] = ahead and state == GREEN
        else:
            out["stop_sign"] = -0.3 < to_line <= th.stop_sign_range_m
        to_box = _front_gap(ep, k, "box_entry")
        inside = to_box <= 0 and ep.ego_s[k] - EGO_REAR_OVERHANG < sc.marks["box_exit"]  # rear not yet out
        out["intersection_ahead"] = bool(0 < to_box <= th.intersection_range_m or inside)
    return {key: bool(v) for key, v in out.items()}


# -- meta behaviour ---------------------------------------------------------------------------
def meta_behavior(ep, k: int, th: LabelThresholds = THRESHOLDS) -> MetaBehavior:
    k5 = k + HORIZON_STEPS
    if k5 >= ep.n_steps:
        raise ValueError(f"step {k} has no 5 s future in a {ep.duration_s} s episode")
    v0, v5 = float(ep.ego_v[k]), float(ep.ego_v[k5])
    k4 = k5 - int(round(1.0 / ep.dt))
    last_second = float(np.hypot(*(ep.ego_xy[k5] - ep.ego_xy[k4])))
    if v5 < th.stop_speed and last_second < th.stop_last_second_m:
        lon = "STOP"
    elif v5 - v0 > th.speed_change:
        lon = "ACCELERATE"
    elif v5 - v0 < -th.speed_change:
        lon = "DECELERATE"
    else:
        lon = "KEEP"
    main = ep.scenario.road_map.main
    road_turn = float(main.ref.heading_at(ep.ego_main_sd[k5, 0]) - main.ref.heading_at(ep.ego_main_sd[k, 0]))
    turn = float(wrap_angle(ep.ego_yaw[k5] - ep.ego_yaw[k] - road_turn))
    route = ep.scenario.ego.route
    if turn > np.radians(th.turn_heading_deg):
        lat = "LEFT_TURN"
    elif turn < -np.radians(th.turn_heading_deg):
        lat = "RIGHT_TURN"
    else:
        if route.maneuver.endswith("turn") and ep.ego_s[k] >= route.maneuver_span[0]:
            offset = float(world_to_ego(ep.ego_xy[k5], ep.ego_xy[k], ep.ego_yaw[k])[1])  # off the main road
        elif route.maneuver.endswith("turn") and ep.ego_s[k5] >= route.maneuver_span[0]:
            offset = 0.0  # a turn just beginning is not a lane change
        else:
            offset = float(ep.ego_main_sd[k5, 1] - ep.ego_main_sd[k, 1])
        lat = ("LEFT_CHANGE" if offset > th.change_offset_m else
               "RIGHT_CHANGE" if offset < -th.change_offset_m else "STRAIGHT")
    signal = "LEFT" if lat.startswith("LEFT") else "RIGHT" if lat.startswith("RIGHT") else "OFF"
    return MetaBehavior(lon, lat, round(float(np.clip(v5, 0.0, 99.9)), 1), signal)


# -- explanation ------------------------------------------------------------------------------
def _side(sign: float) -> str:
    return "left" if sign > 0 else "right"


def _situation(ep, k: int, reason: Reason, objects: dict[str, bool]) -> str:
    sc = ep.scenario
    kind = reason.kind
    if kind == "lead" and reason.agent >= 0:
        a = reason.agent
        if _mean_accel(ep, a, k, THRESHOLDS.braking_window_s) < THRESHOLDS.lead_braking_accel:
            return "the lead vehicle ahead is braking"
        if ep.agent_v[a, k] < 0.5:
            return "the lead vehicle ahead is stopped"
        if ep.agent_v[a, k] < ep.ego_v[k] - 1.0:
            return "the lead vehicle ahead is slower"
        return "there is a lead vehicle ahead in the lane"
    if kind == "obstacle" and reason.agent >= 0:
        if ep.agent_kind[reason.agent] == CYCLIST:
            return "a cyclist is ahead in the lane"
        return "a pedestrian is on the road ahead"
    if kind in ("red_light", "yellow_light"):
        return f"the traffic light ahead is {'red' if kind == 'red_light' else 'yellow'}"
    if kind == "stop_sign":
        return "there is a stop sign ahead"
    if kind == "crosswalk":
        t = k * ep.dt
        n = sum(1 for w in sc.walkers if w.crosswalk >= 0 and w.t_start - 1.5 <= t <= w.t_stop)
        return "pedestrians are crossing the road ahead" if n > 1 else "a pedestrian is crossing the road ahead"
    if kind == "yield_oncoming":
        return "there is oncoming traffic at the intersection"
    if kind == "stop_command":
        return "the navigation command requires a stop"
    if kind == "curve":
        kappa = sc.road_map.main.ref.curvature_at(ep.ego_main_sd[k, 0] + np.arange(0.0, 60.0, 2.0))
        return f"the road ahead is curving to the {_side(float(kappa[np.argmax(np.abs(kappa))]))}"
    if kind == "turn":
        return f"the route requires a {'left' if sc.ego.route.maneuver == 'left_turn' else 'right'} turn at the intersection"
    if objects["green_light"]:
        return "the traffic light ahead is green"
    inter = sc.road_map.intersection
    if inter is not None and inter.control == "stop_sign" and ep.ego_stop_cleared[k] and objects["intersection_ahead"]:
        return "the ego vehicle was stopped at the stop sign and the intersection is clear"
    return "the road ahead is clear"


def _action(meta: MetaBehavior, v0: float, reason: Reason) -> str:
    kind = reason.kind
    at_line = kind in ("red_light", "yellow_light", "stop_sign", "crosswalk", "yield_oncoming")
    if meta.longitudinal == "STOP" or (meta.longitudinal == "KEEP" and v0 < 0.5):
        base = "stopped and waiting" if v0 < 0.5 else "stopping"
        if at_line:
            return base + " at the stop line"
        if kind == "lead":
            return base + " behind the lead vehicle"
        return base
    if meta.longitudinal == "DECELERATE":
        if kind in ("lead", "obstacle"):
            return "slowing down to keep a safe distance"
        if kind in ("curve", "turn"):
            return f"slowing down for the {kind}"
        return "slowing down"
    if meta.longitudinal == "ACCELERATE":
        return "accelerating to the target speed" if kind == "free" else "accelerating smoothly"
    return "maintaining a steady speed and a safe distance" if kind == "lead" else "maintaining a steady speed"


def _route_sentence(ep, k: int, meta: MetaBehavior, reason: Reason, objects: dict[str, bool]) -> str:
    cmd = ep.nav_command[k]
    if meta.lateral in ("LEFT_TURN", "RIGHT_TURN"):
        side = "left" if meta.lateral == "LEFT_TURN" else "right"
        return f"the navigation command requires a {side} turn , so the ego vehicle is turning {side} at the intersection ."
    if meta.lateral in ("LEFT_CHANGE", "RIGHT_CHANGE"):
        side = "left" if meta.lateral == "LEFT_CHANGE" else "right"
        state = "occupied" if objects[f"vehicle_{side}_lane"] else "clear"
        return (f"the navigation command requires a lane change to the {side} and the {side} lane is {state} , "
                f"so the ego vehicle is changing lanes .")
    if cmd in ("TURN_LEFT", "TURN_RIGHT"):
        return f"the ego vehicle will turn {'left' if cmd == 'TURN_LEFT' else 'right'} at the intersection ahead ."
    kappa = _curvature_ahead(ep, k)
    if cmd in ("CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT"):
        change = f"will change to the {'left' if cmd == 'CHANGE_LANE_LEFT' else 'right'} lane ."
        if kappa != 0.0:  # the plan bends with the road before the change starts
            return f"the ego vehicle is following the curve of the road to the {_side(kappa)} and {change}"
        return f"the ego vehicle {change}"
    if cmd == "STOP" and reason.kind != "stop_command":
        return "the navigation command requires a stop ahead ."
    if objects["intersection_ahead"]:
        return "the ego vehicle will continue straight at the intersection ."
    if kappa != 0.0:
        return f"the ego vehicle is following the curve of the road to the {_side(kappa)} ."
    return "the ego vehicle is keeping its lane ."


ROUTE_HORIZON_S = 5.0  # the trajectory's horizon: the road the plan will bend along
ROUTE_REACH_M = (15.0, 60.0)  # at least what a crawl covers, at most what the cameras resolve
CURVE_KAPPA = 1e-3  # 1/m: a radius under 1 km counts as a curve


def _curvature_ahead(ep, k: int) -> float:
    """The signed curvature of largest magnitude on the main road over the stretch the ego covers within the
    trajectory's horizon at its current speed (15-60 m ahead of it), 0.0 where that stretch is straight.

    What the route sentence names: the bend the cameras show ahead and the plan must follow, with its side.
    (It used to be the curvature under the ego alone, so at a curve's start the sentence said "keeping its
    lane" above a bent future, and the trajectory learnt to go straight whenever its text said so:
    docs/training.md, "why y = 0 at curves".)"""
    ref = ep.scenario.road_map.main.ref
    reach = float(np.clip(ep.ego_v[k] * ROUTE_HORIZON_S, *ROUTE_REACH_M))
    kappa = np.asarray(ref.curvature_at(ep.ego_main_sd[k, 0] + np.arange(0.0, reach + 1e-9, 2.0)))
    i = int(np.argmax(np.abs(kappa)))
    return float(kappa[i]) if abs(kappa[i]) > CURVE_KAPPA else 0.0


def explanation(ep, k: int, meta: MetaBehavior, objects: dict[str, bool]) -> str:
    reason = ep.reasons[k]
    first = f"{_situation(ep, k, reason, objects)} , so the ego vehicle is {_action(meta, float(ep.ego_v[k]), reason)} ."
    text = f"{first} {_route_sentence(ep, k, meta, reason, objects)}"
    tokens = text.split()
    return " ".join(tokens[:MAX_EXPLANATION_TOKENS])


__all__ = ["CRITICAL_OBJECTS", "LabelThresholds", "THRESHOLDS", "critical_objects", "meta_behavior", "explanation",
           "load_words", "unknown_words"]
