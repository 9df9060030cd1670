"""The safety check's context from the closed-loop world: perfect perception at one step.

Every road user (lane agents, then walkers, in the world's agent order) becomes an `Obstacle` in the
ego frame at the step: the box centre, heading and size, and its velocity (speed along its heading,
as the world records it) rotated into the ego frame; ground velocity, not relative to the ego.

The corridor is where the ego may legally drive over the plan horizon:
  * on a route that stays on the main road (follow, lane changes, straight through an intersection):
    the main road's carriageway in the ego's direction, i.e. all forward lanes: centreline halfway
    between the divider and the right kerb, half width = half the carriageway;
  * on a turn route: the route path itself (approach lane, turn arc, target lane), one lane wide.
It runs from CORRIDOR_BEHIND_M behind the ego to CORRIDOR_AHEAD_M ahead (past anything a 5 s plan at
20 m/s reaches), resampled every CORRIDOR_STEP_M.

`corridor=False` leaves the corridor out: the road users only, what a planner has from an object list and no map
(`ddrive sim --safety-perception objects`). `velocities=False` also drops their velocities: static boxes, what the
node gets on ~/input/obstacles, a MarkerArray with no velocity field (`--safety-perception boxes`); `ego_boxes`
gives those boxes as plain tuples, what `ddrive sim --ros` publishes to the node.
"""
from __future__ import annotations

import numpy as np

from ddrive_ros.reflection.safety import Corridor, Limits, Obstacle, SafetyContext
from ddrive_ros.reflection.tracking import BoxTracker
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.road import LANE_WIDTH
from ddrive_ros.sim.scenario import EGO_CENTER_OFFSET, EGO_LENGTH, EGO_WIDTH
from ddrive_ros.trajectory import world_to_ego, wrap_angle

CORRIDOR_BEHIND_M = 10.0
CORRIDOR_AHEAD_M = 130.0
CORRIDOR_STEP_M = 2.0


def _corridor_world(world: ClosedLoopWorld, k: int) -> tuple[np.ndarray, float]:
    """(M, 2) world centreline and half width of the corridor at step k."""
    sc = world.scenario
    route = sc.ego.route
    if route.maneuver.endswith("turn"):
        s = float(world.ego_s[k])
        at = np.arange(s - CORRIDOR_BEHIND_M, s + CORRIDOR_AHEAD_M + 1e-9, CORRIDOR_STEP_M)
        return route.path.point_at(at), LANE_WIDTH / 2
    main = sc.road_map.main
    s = float(world.ego_main_sd[k, 0])
    at = np.arange(s - CORRIDOR_BEHIND_M, s + CORRIDOR_AHEAD_M + 1e-9, CORRIDOR_STEP_M)
    half = main.n_forward * LANE_WIDTH / 2
    pts, _ = main.ref.pose_at(at, np.full(len(at), -half))  # forward lanes lie right of the divider
    return pts, half


def safety_context(world: ClosedLoopWorld, step: int | None = None, limits: Limits | None = None,
                   corridor: bool = True, velocities: bool = True) -> SafetyContext:
    """The context of a plan made at `step` (default: the world's current step), in that step's ego frame;
    without the drivable corridor when `corridor` is False, the road users standing still when `velocities` is
    False."""
    k = world.k if step is None else int(step)
    if not 0 <= k <= world.k:
        raise ValueError(f"step {k} is not recorded yet (the world is at step {world.k})")
    ego_xy, ego_yaw, v0 = world.ego_xy[k], float(world.ego_yaw[k]), float(world.ego_v[k])
    obstacles: tuple[Obstacle, ...] = ()
    if world.n_agents:
        xy = world_to_ego(world.agent_xy[:, k], ego_xy, ego_yaw)
        yaw = np.asarray(wrap_angle(world.agent_yaw[:, k] - ego_yaw), dtype=float)
        v = world.agent_v[:, k] if velocities else np.zeros(world.n_agents)
        size = world.agent_size[:, :2]
        obstacles = tuple(Obstacle(float(p[0]), float(p[1]), float(h), float(sz[0]), float(sz[1]),
                                   float(s * np.cos(h)), float(s * np.sin(h)))
                          for p, h, s, sz in zip(xy, yaw, v, size))
    lanes = None
    if corridor:
        line, half = _corridor_world(world, k)
        lanes = Corridor(world_to_ego(line, ego_xy, ego_yaw), half)
    return SafetyContext(v0=v0, obstacles=obstacles, corridor=lanes, limits=limits or Limits(),
                         ego_length=EGO_LENGTH, ego_width=EGO_WIDTH, ego_center_offset=EGO_CENTER_OFFSET)


def ego_boxes(world: ClosedLoopWorld, step: int | None = None) -> list[tuple[float, float, float, float, float]]:
    """The road users at `step` (default: the world's current step) as (x, y, yaw, length, width) boxes in that
    step's ego frame (base_link): what a perception stack publishes on the node's ~/input/obstacles, and exactly
    the obstacles of `safety_context(..., corridor=False, velocities=False)`."""
    ctx = safety_context(world, step, corridor=False, velocities=False)
    return [(o.x, o.y, o.yaw, o.length, o.width) for o in ctx.obstacles]


class TrackedBoxes:
    """`--safety-perception tracked`: the node's boxes (`ego_boxes`, on every camera step, as the bridge publishes
    them) through the node's `BoxTracker`; the context of a plan holds the tracked boxes with their estimated
    velocities at the plan's step, no corridor. One instance per driver: a new world starts a new track."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits
        self.tracker = BoxTracker()
        self._world: ClosedLoopWorld | None = None
        self._next = 0  # the first step not fed to the tracker yet

    def __call__(self, world: ClosedLoopWorld) -> SafetyContext:
        if world is not self._world:
            self._world, self._next, self.tracker = world, 0, BoxTracker()
        k = world.k
        for j in range(self._next, k + 1):
            if world.is_camera_step(j):
                pose = (float(world.ego_xy[j, 0]), float(world.ego_xy[j, 1]), float(world.ego_yaw[j]))
                self.tracker.update(float(world.t[j]), pose, ego_boxes(world, j))
        self._next = k + 1
        pose = (float(world.ego_xy[k, 0]), float(world.ego_xy[k, 1]), float(world.ego_yaw[k]))
        return SafetyContext(v0=float(world.ego_v[k]), obstacles=self.tracker.obstacles_at(float(world.t[k]), pose),
                             limits=self.limits or Limits(), ego_length=EGO_LENGTH, ego_width=EGO_WIDTH,
                             ego_center_offset=EGO_CENTER_OFFSET)
