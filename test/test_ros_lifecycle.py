"""The managed planner node (its own process) driven through its lifecycle services from this
process, with a live feed: nothing is subscribed or planned until activate; deactivate pauses
without unloading (reactivation is quick and plans again); cleanup and shutdown end cleanly."""
from __future__ import annotations

import time

import numpy as np

from ddrive_ros.ros import interface as I
from ddrive_ros.ros.domain_id import pid_domain_id
from ddrive_ros.trajectory import ego_to_world
from ddrive_ros.ros.node_process import NodeProcess
from ddrive_ros.ros.listener import Listener, start_feed

DOMAIN = pid_domain_id(6)
NODE = {"checkpoint": "random:tiny:fast_ddrive", "decoder": "diffusion", "steps": 2, "num_threads": 1,
        "planning_rate_hz": 2.0, "diagnostics_rate_hz": 2.0, "output_frame": "odom"}


def _transition(listener: Listener, transition_id: int) -> tuple[bool, float]:
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    t0 = time.monotonic()
    ok = listener.call("change_state", ChangeState, ChangeState.Request(transition=Transition(id=transition_id)),
                       timeout=120.0).success
    return ok, time.monotonic() - t0


def _state(listener: Listener) -> str:
    from lifecycle_msgs.srv import GetState

    return listener.call("get_state", GetState, GetState.Request(), resend_every=2.0).current_state.label


def test_lifecycle_transitions_from_another_process(tmp_path):
    from lifecycle_msgs.msg import Transition

    node = NodeProcess(NODE, DOMAIN, tmp_path / "node.log", module="ddrive_ros.ros.lifecycle_node",
                       remaps=I.bag_remaps(False))
    feed = start_feed(DOMAIN, tmp_path / "feed.log", camera_hz=10, odom_hz=50, duration=600)
    listener = Listener(DOMAIN)
    front = I.bag_remaps(False)[I.camera_input("front")]  # the remapped topic the node subscribes to
    try:
        assert listener.wait_for(lambda: True, 1, "") and _state(listener) == "unconfigured"
        ok, configure_s = _transition(listener, Transition.TRANSITION_CONFIGURE)
        assert ok and _state(listener) == "inactive"
        assert listener.node.count_subscribers(front) == 0  # model loaded, nothing subscribed yet
        time.sleep(1.5)
        assert not listener.plans and not listener.diagnostics

        ok, activate_s = _transition(listener, Transition.TRANSITION_ACTIVATE)
        assert ok and _state(listener) == "active"
        listener.wait_for(lambda: listener.node.count_subscribers(front) > 0, 10, "camera subscription")
        listener.wait_for(lambda: len(listener.plans) >= 2, 60, "plans while active")

        ok, _ = _transition(listener, Transition.TRANSITION_DEACTIVATE)
        assert ok and _state(listener) == "inactive"
        time.sleep(1.0)  # a plan in flight may still land
        n = len(listener.plans)
        time.sleep(2.0)
        assert len(listener.plans) == n  # paused
        assert listener.node.count_subscribers(front) == 0

        ok, reactivate_s = _transition(listener, Transition.TRANSITION_ACTIVATE)
        assert ok and reactivate_s < 2.0  # the model stayed loaded: no reload
        listener.wait_for(lambda: len(listener.plans) >= n + 2, 60, "plans after reactivation")

        for tid, label in ((Transition.TRANSITION_DEACTIVATE, "inactive"), (Transition.TRANSITION_CLEANUP, "unconfigured"),
                           (Transition.TRANSITION_UNCONFIGURED_SHUTDOWN, "finalized")):
            ok, _ = _transition(listener, tid)
            assert ok and _state(listener) == label
        assert node.tail(500).count("planner ready in") == 1
        # output_frame odom: the Path is the plan transformed with the odometry pose at its input stamp
        plan = next(p for _, p in listener.plans if not p["fallback"])
        _, frame_id, xy = next(path for path in listener.paths if abs(path[0] - plan["input_stamp"]) < 1e-6)
        ego = np.array([(r["x"], r["y"]) for r in plan["trajectory"]])
        assert frame_id == "odom" and plan["output_frame_id"] == "odom" and plan["frame_id"] == "base_link"
        x0, y0, yaw0 = plan["odom_pose"]
        assert np.hypot(x0, y0) > 1.0  # the feed's ego has left the odometry origin
        np.testing.assert_allclose(xy, ego_to_world(ego, (x0, y0), yaw0), atol=1e-6)
    finally:
        listener.close()
        feed.terminate()
        feed.wait(10)
        node.stop()
