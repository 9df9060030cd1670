"""The navigation command the ego's route gives at each step: one rule for recorded episodes
(`sim/world.py`) and the closed loop (`sim/closed_loop.py`), so that a model reads in closed loop
what it was trained on.

A manoeuvre's command (TURN_*, CHANGE_LANE_*) holds until the manoeuvre is done, then the route
says FOLLOW_LANE for the rest of the episode. A turn is done when the ego passes the end of the
route's turn (route arc length). A lane change is done when the ego is in the target lane (its
base_link within half a lane of the target lane's centre) or past the end of the lane-change path,
whichever comes first: what a lane-level route tells a real car, whose next lanelet after the change
is a plain lane follow. A model that cannot see how far across it already is reads the command
ending as "you are there" and stops moving sideways, instead of planning a whole lane change again
from wherever it is.
"""
from __future__ import annotations

from ddrive_ros.sim.road import LANE_WIDTH, Route

MANOEUVRE_COMMANDS = ("TURN_LEFT", "TURN_RIGHT", "CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT")


class RouteCommand:
    """Latches FOLLOW_LANE once the manoeuvre is done (the ego does not get the command back by
    drifting out of the target lane again)."""

    def __init__(self, command: str, route: Route):
        self.command = command
        self.route = route
        self.done = False

    def at(self, route_s: float, main_d: float) -> str:
        """`route_s`: the ego's arc length along its route; `main_d`: its base_link's lateral offset
        in main-road coordinates (left positive)."""
        if self.command not in MANOEUVRE_COMMANDS:
            return self.command  # FOLLOW_LANE, STOP: nothing to finish
        if not self.done:
            past_end = route_s > self.route.maneuver_span[1]
            target = self.route.target_d
            in_target = target is not None and abs(main_d - target) < LANE_WIDTH / 2  # set for lane changes only
            self.done = past_end or in_target
        return "FOLLOW_LANE" if self.done else self.command
