"""The closed loop through the real node process (DDS, use_sim_time, its own ROS_DOMAIN_ID): the
node's plans drive the world, and they drive it exactly as the same planner does in-process."""
from __future__ import annotations

import json

import pytest

from ddrive_ros.cli import main
from ddrive_ros.ros.domain_id import pid_domain_id
from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode
from ddrive_ros.sim.drivers import ModelDriver
from ddrive_ros.sim.sample import episode_seeds

DOMAIN = pid_domain_id(11)


def test_ddrive_sim_ros_drives_through_the_node_like_the_in_process_planner(tmp_path):
    out = tmp_path / "sim_ros.json"
    rc = main(["sim", "--ros", "--domain-id", str(DOMAIN), "--episodes", "1", "--seed", "3", "--duration", "3",
               "--methods", "speculative", "--latency-ms", "200", "--json", str(out), "--no-progress"])
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = {r["method"]: r for r in doc["rows"]}
    assert set(rows) == {"expert", "speculative"} and doc["config"]["ros"] is True
    via_node = next(e for e in doc["episodes"] if e["method"] == "speculative")
    assert via_node["duration_s"] == pytest.approx(1.0) or via_node["terminated"] != "duration"
    assert rows["speculative"]["latency_ms"] == pytest.approx(200.0)
    # the same episode in-process: raw rgb8 images, odometry and the one observation recipe give the
    # node the same observation, greedy decoding the same tokens, so the same driving and scores
    from ddrive_ros.planner import Planner

    planner = Planner.from_checkpoint("fast_ddrive_tiny", decoder="speculative")
    expert_progress = next(e for e in doc["episodes"] if e["method"] == "expert")["progress_m"]
    run = run_episode(episode_seeds(3, 1)[0], "speculative", lambda w: ModelDriver(planner, planner.restart_sampling),
                      LoopOptions(duration_s=3.0, latency_ms=200.0), expert_progress_m=expert_progress)
    assert run.score.progress_m == pytest.approx(via_node["progress_m"], abs=1e-6)
    assert run.score.pdms == pytest.approx(via_node["pdms"], abs=1e-9)
    assert len(run.plans) == 5  # 1 s driven at 5 Hz


def test_ddrive_sim_ros_bridges_the_road_users_to_the_node_and_its_safety_check_drives_like_in_process(tmp_path):
    """--ros --reflect safety: the bridge publishes the world's road users as boxes on the node's
    ~/input/obstacles before each frame, and every node plan checks against its own frame's boxes. Tracked
    (track_obstacles, the default) or as standing boxes, the episode drives exactly as the in-process
    planner given the same context (`--safety-perception tracked|boxes`). On this episode (seed 10) the
    car ahead drives away: as a standing box it makes the check slow the plan; tracked, it does not."""
    from functools import partial

    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.safety_context import TrackedBoxes, safety_context

    opts = LoopOptions(duration_s=3.0, latency_ms=200.0)
    seed = episode_seeds(10, 1)[0]
    on = Planner.from_checkpoint("fast_ddrive_tiny", decoder="speculative", reflect="safety")
    progress = {}
    for i, seen_as in enumerate(("tracked", "boxes")):
        out = tmp_path / f"sim_ros_safety_{seen_as}.json"
        rc = main(["sim", "--ros", "--domain-id", str(DOMAIN + 1 + i), "--episodes", "1", "--seed", "10", "--duration",
                   "3", "--methods", "speculative", "--reflect", "safety", "--latency-ms", "200", "--json", str(out),
                   "--no-progress"] + (["--safety-perception", seen_as] if seen_as == "boxes" else []))
        assert rc == 0
        doc = json.loads(out.read_text())
        assert doc["config"]["safety_perception"] == seen_as
        seen = doc["config"]["node_obstacle_plans"]["speculative+safety"]
        assert seen["same_frame"] > 0 and seen["older"] == 0 and seen["none"] == 0
        via_node = next(e for e in doc["episodes"] if e["method"] == "speculative+safety")
        expert_progress = next(e for e in doc["episodes"] if e["method"] == "expert")["progress_m"]
        context = TrackedBoxes() if seen_as == "tracked" else partial(safety_context, corridor=False, velocities=False)
        run = run_episode(seed, seen_as, lambda w: ModelDriver(on, on.restart_sampling, context).bind(w), opts,
                          expert_progress_m=expert_progress)
        assert run.score.progress_m == pytest.approx(via_node["progress_m"], abs=1e-6), seen_as
        assert run.score.pdms == pytest.approx(via_node["pdms"], abs=1e-9), seen_as
        progress[seen_as] = via_node["progress_m"]
    assert progress["tracked"] > progress["boxes"] + 0.1


def test_a_frame_lost_on_the_way_to_the_node_is_sent_again_and_the_episode_drives_as_in_process(tmp_path):
    """The node's sensor subscriptions are best effort: on a loaded machine a frame's image can be lost, and the node
    then plans the set before for ever while the bridge waits for the lost frame's plan (a 100-episode run stopped so).
    Here the bridge leaves out the front image at 0.8 s the first time (`drop_once`, test only); it sends the frame
    again after RESEND_AT_S[0] without a plan, and the episode drives exactly as the in-process planner drives it."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.ros.sim_bridge import NodeBridge, NodeBridgeOptions

    opts = LoopOptions(duration_s=3.0, latency_ms=200.0)
    seed = episode_seeds(3, 1)[0]
    expert = run_episode(seed, "expert", None, opts)
    bridge = NodeBridge(NodeBridgeOptions(domain_id=DOMAIN + 3, log_path=tmp_path / "node.log", drop_once=(0.8, "front")))
    try:
        via_node = run_episode(seed, "node", lambda w: bridge.bind(None), opts, expert.score.progress_m)
    finally:
        bridge.close()
    assert bridge.resends == 1
    planner = Planner.from_checkpoint("fast_ddrive_tiny", decoder="speculative")
    run = run_episode(seed, "in-process", lambda w: ModelDriver(planner, planner.restart_sampling), opts,
                      expert.score.progress_m)
    assert run.score.pdms == pytest.approx(via_node.score.pdms, abs=1e-9)
    assert run.score.progress_m == pytest.approx(via_node.score.progress_m, abs=1e-6)
