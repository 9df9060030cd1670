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
    ~/input/obstacles before each frame; every node plan checks against its own frame's boxes, and the
    episode drives exactly as the in-process planner given the same boxes (`--safety-perception boxes`).
    On this episode (seed 10) the check slows the plan: reflect off drives further."""
    from functools import partial

    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.safety_context import safety_context

    out = tmp_path / "sim_ros_safety.json"
    rc = main(["sim", "--ros", "--domain-id", str(DOMAIN + 1), "--episodes", "1", "--seed", "10", "--duration", "3",
               "--methods", "speculative", "--reflect", "safety", "--latency-ms", "200", "--json", str(out),
               "--no-progress"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["safety_perception"] == "boxes"
    seen = doc["config"]["node_obstacle_plans"]["speculative+safety"]
    assert seen["same_frame"] > 0 and seen["older"] == 0 and seen["none"] == 0
    via_node = next(e for e in doc["episodes"] if e["method"] == "speculative+safety")
    expert_progress = next(e for e in doc["episodes"] if e["method"] == "expert")["progress_m"]
    opts = LoopOptions(duration_s=3.0, latency_ms=200.0)
    seed = episode_seeds(10, 1)[0]
    boxes = partial(safety_context, corridor=False, velocities=False)
    on = Planner.from_checkpoint("fast_ddrive_tiny", decoder="speculative", reflect="safety")
    run = run_episode(seed, "safety", lambda w: ModelDriver(on, on.restart_sampling, boxes).bind(w), opts,
                      expert_progress_m=expert_progress)
    assert run.score.progress_m == pytest.approx(via_node["progress_m"], abs=1e-6)
    assert run.score.pdms == pytest.approx(via_node["pdms"], abs=1e-9)
    off = Planner.from_checkpoint("fast_ddrive_tiny", decoder="speculative")
    free = run_episode(seed, "off", lambda w: ModelDriver(off, off.restart_sampling), opts, expert_progress_m=expert_progress)
    assert free.score.progress_m > via_node["progress_m"] + 0.1  # the boxes made the node's plans slow down
