"""End to end over Fast DDS: synthetic bag -> replay (this process) -> planner node (subprocess) -> recorded outputs.

Each test uses its own ROS_DOMAIN_ID derived from the pid, so parallel test runs do not see each other.
The node runs random tiny weights with the cheap diffusion decoder (2 forwards per block).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from ddrive_ros.bags.simple_drive import Faults, write_simple_bag
from ddrive_ros.ros.domain_id import pid_domain_id
from ddrive_ros.ros.replay import ReplayOptions, replay

DOMAIN = pid_domain_id(0)  # slots 0-3: one per test (domain_offset)
START = 100.0  # bag start time (s)
NODE = {"checkpoint": "random:tiny:fast_ddrive", "decoder": "diffusion", "steps": 2, "num_threads": 1,
        "planning_rate_hz": 5.0, "max_input_age_s": 0.5,
        # well above a plan's time (1.0-1.5 s for a random tiny plan beside the replay on an AVX2-only 2-core
        # machine; the 1 s default dropped them late): these tests are about the pipeline, test_ros_live.py
        # tests the watchdog
        "plan_timeout_s": 5.0}


def _run(tmp_path, bag, domain_offset: int, **params):
    return replay(ReplayOptions(bag=bag, out=tmp_path / "out", frames=2, start_node=True,
                                node_params={**NODE, **params}, domain_id=DOMAIN + domain_offset,
                                discovery_timeout_s=120.0, tail_s=2.0))


def _inputs_status(diag: dict) -> dict:
    return next(s for s in diag["status"] if s["name"].endswith("inputs"))


def _planning_status(diag: dict) -> dict:
    return next(s for s in diag["status"] if s["name"].endswith("planning"))


def test_end_to_end_path_and_plan_per_frame(tmp_path):
    bag = write_simple_bag(tmp_path / "bag", duration_s=8.0, start_s=START)
    rep = _run(tmp_path, bag, 0)
    out = rep["outputs"]
    assert rep["node_exit_code"] == 0
    # /clock runs on through the tail wait, so every input goes stale after the bag's end: fallbacks then, only then
    fallbacks = [p for p in out["plans"] if p["fallback"]]
    assert fallbacks and all(p["reason"].startswith("stale inputs") for p in fallbacks), \
        [p["reason"] for p in fallbacks]
    # Path and plan JSON are published together, in the same order (the recorder may miss the very last)
    pairs = [(p, path) for p, path in zip(out["plans"], out["paths"]) if not p["fallback"]]
    plans, paths = [p for p, _ in pairs], [path for _, path in pairs]
    assert len(plans) >= 5, rep["counts"]
    # one latency message and one processing time per real plan
    assert len(plans) == len(out["latency"]) == len(out["processing_time_ms"])
    assert len(out["cyclic_time_ms"]) == len(plans) - 1 and all(v > 0 for v in out["cyclic_time_ms"])
    assert abs(len(out["paths"]) - len(out["plans"])) <= 1 and abs(len(out["markers"]) - len(out["plans"])) <= 1
    stamps = [p["input_stamp"] for p in plans]
    assert len(set(stamps)) == len(stamps)  # never the same frame twice
    for p, path in zip(plans, paths):
        assert path["stamp"] == pytest.approx(p["input_stamp"], abs=1e-6)
        assert path["frame_id"] == "base_link"
        t = np.array([r["t"] for r in p["trajectory"]])
        assert len(t) == 20 and t[-1] == pytest.approx(5.0)
        np.testing.assert_allclose(path["pose_stamps"], p["input_stamp"] + t, atol=1e-6)
        np.testing.assert_allclose(path["xy"], [(r["x"], r["y"]) for r in p["trajectory"]], atol=1e-6)
        # anchors are camera frames (10 Hz from START), at least frame_history_s after the start
        k = (p["input_stamp"] - START) / 0.1
        assert abs(k - round(k)) < 1e-3 and p["input_stamp"] >= START + 0.5 - 1e-6
        assert {"preprocess", "encode", "decode", "plan"} <= set(p["latency_ms"])
        assert p["model"]["random_weights"] is True
    assert all(m[0] == ("", 0, 0, 3) for m in out["markers"])  # DELETEALL first
    assert rep["scored_plans"] >= 1 and np.isfinite(rep["ade_m"]) and np.isfinite(rep["fde_m"])
    assert rep["latency_ms"]["plan"]["p50"] > 0
    counters = rep["node_counters"]  # the node's own totals, from its last diagnostics
    assert counters["ticks"] >= counters["plans"] - counters["catch_ups"] > 0
    assert counters["plans"] >= len(plans) - 3 and counters["skipped_ticks"] >= 0  # diagnostics at 2 Hz may lag
    assert len(rep["frames"]) == 2 and all(os.path.getsize(f) > 1000 for f in rep["frames"])
    meta = (tmp_path / "out" / "recorded" / "metadata.yaml").read_text()
    assert "storage_identifier: mcap" in meta and meta.count("reliability: reliable") >= 8  # mcap, QoS recorded
    # /clock keeps running through the tail wait (as ros2 bag play --clock): the last frames are planned too
    assert plans[-1]["input_stamp"] >= START + 8.0 - 0.5, plans[-1]["input_stamp"]
    during = [d for d in out["diagnostics"] if d["stamp"] <= START + 8.0]
    assert _inputs_status(during[-1])["level"] == 0
    assert _planning_status(during[-1])["level"] == 0, _planning_status(during[-1])
    # per-topic statuses in the manner of diagnostic_updater
    names = {s["name"] for s in during[-1]["status"]}
    assert {"ddrive_planner: camera/front frequency", "ddrive_planner: odometry timestamp",
            "ddrive_planner: output frequency"} <= names


def test_faults_stale_camera_malformed_images_nan_odometry(tmp_path):
    silent = (4.0, 7.0)
    faults = Faults(silent_camera="left_front", silent_from=silent[0], silent_to=silent[1],
                    malformed_images=[1.5, 2.5], bad_encoding_images=[2.0], nan_odometry=[1.0, 3.0])
    bag = write_simple_bag(tmp_path / "bag", duration_s=11.0, start_s=START, faults=faults)
    rep = _run(tmp_path, bag, 1, fallback="stop")
    out = rep["outputs"]
    assert rep["node_exit_code"] == 0  # stayed up
    last_left = START + silent[0] - 0.1
    stale_at = last_left + 0.5  # max_input_age_s
    # diagnostics ERROR naming the silent camera within max_input_age_s of it becoming stale
    errors = [d for d in out["diagnostics"] if _inputs_status(d)["level"] == 2
              and "camera/left_front" in _inputs_status(d)["message"] and d["stamp"] > START + 1.0]
    assert errors, [(d["stamp"], _inputs_status(d)["message"]) for d in out["diagnostics"]]
    assert stale_at - 1e-6 <= errors[0]["stamp"] <= stale_at + 0.5
    # no plan from stale data: no real plan anchored while the camera was silent
    real = [p for p in out["plans"] if not p["fallback"]]
    assert not [p for p in real if START + silent[0] - 1e-6 <= p["input_stamp"] < START + silent[1]]
    # the safe fallback: a comfortable stop along the last plan, flagged
    fb = [p for p in out["plans"] if p["fallback"] and p["stale_inputs"] == ["camera/left_front"]]
    assert fb and all(p["input_stamp"] < START + silent[0] for p in fb)
    # (after the bag's end everything goes stale); no planner-health fallback in this run
    assert all(p["reason"].startswith("stale inputs") for p in out["plans"] if p["fallback"])
    v = np.array([r["v"] for r in fb[0]["trajectory"]])
    assert np.all(np.diff(v) <= 1e-9) and "camera/left_front" in fb[0]["stale_inputs"]
    assert any(_planning_status(d)["values"]["fallback_active"] == "True" for d in errors)
    # recovery when the camera returns
    assert [p for p in real if p["input_stamp"] >= START + silent[1]]
    late = [d for d in out["diagnostics"] if START + silent[1] + 0.6 < d["stamp"] <= START + 11.0]
    assert late and all(_inputs_status(d)["level"] < 2 for d in late)
    # invalid messages dropped and counted, visible in diagnostics
    values = _inputs_status(out["diagnostics"][-1])["values"]
    assert int(values["dropped/nan_odometry"]) == 2
    assert int(values["dropped/bad_step"]) >= 1
    assert int(values["dropped/unsupported_encoding"]) >= 1


def _soak(tmp_path, seconds: float, domain_offset: int):
    bag = write_simple_bag(tmp_path / "bag", duration_s=seconds, camera_hz=30.0, odom_hz=50.0, start_s=START)
    # planning requested at 20 Hz while one plan takes longer than 50 ms: ticks get skipped, nothing queues
    rep = _run(tmp_path, bag, domain_offset, planning_rate_hz=20.0, camera_buffer_size=30)
    out = rep["outputs"]
    assert rep["node_exit_code"] == 0
    planning = _planning_status(out["diagnostics"][-1])["values"]
    inputs = _inputs_status(out["diagnostics"][-1])["values"]
    assert int(planning["skipped_ticks"]) > 0
    real = [p for p in out["plans"] if not p["fallback"]]
    assert len(real) >= 5 and 0 <= len(real) - int(planning["plans"]) <= 1  # the last diagnostics may precede the last plan
    for cam in ("left_front", "front", "right_front"):  # bounded ring buffers
        assert int(inputs[f"buffered/camera/{cam}"]) <= 30
    assert int(inputs["buffered/odometry"]) <= 3.0 * 50 + 2
    rss = [(t, kb) for t, kb in rep["node_rss_kb"] if kb > 0]
    base = next(kb for t, kb in rss if t >= 3.0)  # after the allocator has warmed up on real frames
    growth_mb = (max(kb for _, kb in rss) - base) / 1024
    assert growth_mb < 64.0, rss  # stated bound: < 64 MB RSS growth over the soak
    return rep


def test_soak_cameras_30hz_bounded_memory(tmp_path):
    _soak(tmp_path, 15.0, 2)


@pytest.mark.slow
def test_soak_one_minute(tmp_path):
    _soak(tmp_path, 60.0, 3)


def test_a_node_that_does_not_stop_in_time_leaves_its_stacks_in_its_log(tmp_path):
    """NodeProcess.stop: a node still running `timeout` s after SIGINT gets SIGUSR1 and dumps every thread's stack
    into its log (faulthandler, registered by node.main) before it is killed, so a shutdown that hangs (seen once in
    make test: exit -9, the log silent) can be read. Here the timeout is 0 s: no node stops that fast."""
    import time

    from ddrive_ros.ros.node_process import NodeProcess

    log = tmp_path / "node.log"
    node = NodeProcess(NODE, pid_domain_id(9), log)  # a slot of its own
    deadline = time.monotonic() + 120.0
    while "subscribed to" not in log.read_text():
        assert node.alive() and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)
    code = node.stop(timeout=0.0)
    text = log.read_text()
    assert "most recent call first" in text  # faulthandler's stack dump
    assert "[NodeProcess] the node did not exit within 0 s of SIGINT" in text
    assert code in (0, -9)  # it may finish its clean shutdown within the second it gets to write the stacks
