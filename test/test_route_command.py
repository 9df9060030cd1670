"""The route's navigation command: a lane change's command ends when the ego is in the target lane
(before the end of the lane-change path), a turn's at the end of the turn, FOLLOW_LANE stays once
given, and the recorded episode and the closed loop hand the model the same commands."""
from __future__ import annotations

import numpy as np

from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.road import LANE_WIDTH
from ddrive_ros.sim.route_command import RouteCommand
from ddrive_ros.sim.scenario import sample_scenario
from ddrive_ros.sim.world import Episode


def _first_seed(prefix: str, duration_s: float = 12.0, skip: int = 0) -> int:
    for seed in range(400):
        if sample_scenario(seed, duration_s).nav_command.startswith(prefix):
            if skip == 0:
                return seed
            skip -= 1
    raise AssertionError(f"no {prefix} scenario in seeds 0..399")


def test_a_lane_change_command_ends_in_the_target_lane_before_the_path_ends_and_stays_ended():
    for skip in range(3):
        ep = Episode(_first_seed("CHANGE_LANE", skip=skip))
        route = ep.scenario.ego.route
        follow = np.flatnonzero(ep.nav_command == "FOLLOW_LANE")
        assert len(follow), f"seed {ep.seed}: the lane change never ended"
        k_end = int(follow[0])
        assert (ep.nav_command[:k_end] == ep.scenario.nav_command).all()
        assert (ep.nav_command[k_end:] == "FOLLOW_LANE").all(), "FOLLOW_LANE is latched"
        # in the target lane when it ends, not before
        assert abs(ep.ego_main_sd[k_end, 1] - route.target_d) < LANE_WIDTH / 2
        assert abs(ep.ego_main_sd[k_end - 1, 1] - route.target_d) >= LANE_WIDTH / 2
        # about half-way along the lane-change path (the expert crosses the lane line there)
        s0, s1 = route.maneuver_span
        assert s0 < ep.ego_s[k_end] < s1


def test_a_turn_command_ends_after_the_turn_and_follow_lane_never_changes():
    ep = Episode(_first_seed("TURN"))
    follow = np.flatnonzero(ep.nav_command == "FOLLOW_LANE")
    if len(follow):
        assert ep.ego_s[follow[0]] > ep.scenario.ego.route.maneuver_span[1]
    route = Episode(_first_seed("FOLLOW_LANE")).scenario.ego.route
    cmd = RouteCommand("FOLLOW_LANE", route)
    assert {cmd.at(s, d) for s, d in [(0.0, 0.0), (1e9, 0.0), (10.0, -3.5)]} == {"FOLLOW_LANE"}
    cmd = RouteCommand("STOP", route)
    assert cmd.at(1e9, 0.0) == "STOP"  # not a manoeuvre: nothing to finish


def test_the_closed_loop_gives_the_same_commands_as_the_recorded_episode():
    seed = _first_seed("CHANGE_LANE", duration_s=8.0)
    ep = Episode(seed, 8.0)
    world = ClosedLoopWorld(seed, 8.0)
    while not world.done:
        world.step_expert()
    assert (ep.nav_command == "FOLLOW_LANE").any(), "the change ends within the 8 s episode"
    if not ep.scenario.road_map.crosswalks:
        assert list(world.nav_command) == list(ep.nav_command)
