"""Plain-Python parts of the node's health and interface: watchdog verdicts, windowed counters,
diagnostic_updater-style statuses, parameter checks, output-frame transform, trajectory rates,
reduced JPEG decodes."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddrive_ros.bags import image_codec
from ddrive_ros.ros import convert
from ddrive_ros.ros.diagnostic_status import ERROR, OK, WARN, FrequencyStatus, TimeStampStatus
from ddrive_ros.ros.watchdog import PlanWatchdog, WindowCount


def test_watchdog_hung_worker_then_recovery():
    wd = PlanWatchdog(timeout_s=0.6)
    wd.inputs_fresh(0.0, True)
    wd.started(0.1)
    wd.finished(0.2, published=True)
    assert wd.verdict(0.5).healthy
    wd.started(1.0)  # this plan hangs
    assert wd.verdict(1.5).healthy  # not yet past the timeout
    v = wd.verdict(1.7)
    assert not v.healthy and v.reason == "hung"
    wd.finished(1.8, published=False)  # dropped late plan
    wd.started(1.9)
    wd.finished(2.0, published=True)
    assert wd.verdict(2.1).healthy


def test_watchdog_failing_planner_and_stale_inputs_do_not_count():
    wd = PlanWatchdog(timeout_s=1.0)
    wd.inputs_fresh(0.0, True)
    wd.finished(0.1, published=True)
    wd.failed("no observation: no_match")
    v = wd.verdict(1.2)
    assert not v.healthy and v.reason == "failing" and "no_match" in v.detail
    wd.inputs_fresh(1.3, False)  # inputs stale: that is the inputs' error, not the planner's
    assert wd.verdict(5.0).healthy
    wd.inputs_fresh(5.0, True)  # fresh again: the planner gets a full timeout before it is blamed
    assert wd.verdict(5.9).healthy and not wd.verdict(6.1).healthy


def test_window_count_returns_to_zero():
    w = WindowCount(10.0)
    assert w.update(0.0, 0) == 0
    assert w.update(1.0, 1) == 1  # one error
    assert w.update(5.0, 1) == 1
    assert w.update(10.5, 1) == 1  # the error (at 1.0) is still inside [0.5, 10.5]
    assert w.update(11.5, 1) == 0  # out of the window: back to OK
    assert w.update(12.0, 3) == 2


def test_frequency_status_levels():
    f = FrequencyStatus(9.0, 11.0, tolerance=0.1, window=5)
    assert f.status(0.0).level == OK  # collecting
    for _ in range(10):
        f.tick()
    assert f.status(1.0).level == OK
    for _ in range(3):
        f.tick()
    st = f.status(2.0)
    assert st.level == WARN and "low" in st.message
    assert f.status(3.0).level == WARN
    for t in (4.0, 5.0, 6.0, 7.0):
        f.status(t)
    assert f.status(8.0).level == ERROR  # nothing over the window


def test_timestamp_status():
    s = TimeStampStatus(-0.1, 0.5)
    assert s.status().level == WARN  # nothing seen
    s.tick(10.0, 10.02)
    assert s.status().level == OK
    s.tick(10.0, 11.0)
    assert s.status().level == ERROR
    s.tick(10.5, 10.0)
    assert "future" in s.status().message


def test_parameter_checks_convert_ints_and_name_the_parameter():
    from rclpy.parameter import Parameter

    from ddrive_ros.ros.params import as_declared_type, check

    p = as_declared_type(Parameter("planning_rate_hz", value=10))
    assert p.type_ == Parameter.Type.DOUBLE and p.value == 10.0 and check(p) is None
    assert "planning_rate_hz" in check(Parameter("planning_rate_hz", value=0.0))
    assert "not one of" in check(Parameter("fallback", value="brake"))
    assert "must be a double" in check(Parameter("tau", value="high"))


def test_output_in_odometry_frame_is_transformed_not_relabelled():
    traj = np.array([[0.5, 1.0, 0.0, 0.0, 2.0], [1.0, 2.0, 1.0, 0.5, 2.0]])
    pose = (10.0, 5.0, math.pi / 2)
    out = convert.to_frame(traj, pose)
    np.testing.assert_allclose(out[:, 1:3], [[10.0, 6.0], [9.0, 7.0]], atol=1e-12)
    np.testing.assert_allclose(out[:, 3], traj[:, 3] + math.pi / 2)
    np.testing.assert_allclose(out[:, [0, 4]], traj[:, [0, 4]])


def test_trajectory_rates():
    t = np.linspace(0.5, 5.0, 10)
    traj = np.stack([t, t, 0 * t, 0.2 * t, 3.0 + 1.5 * t], axis=1)
    accel, heading_rate = convert.trajectory_rates(traj)
    np.testing.assert_allclose(accel, 1.5)
    np.testing.assert_allclose(heading_rate, 0.2)


def test_reduced_jpeg_decode_to_model_size():
    rgb = np.random.default_rng(0).integers(0, 255, (1080, 1920, 3), dtype=np.uint8)
    assert image_codec.reduction_for((1080, 1920), (96, 160)) == 8
    assert image_codec.reduction_for((360, 640), (96, 160)) == 2
    assert image_codec.reduction_for((96, 160), (96, 160)) == 1
    fmt, data = image_codec.rgb_to_compressed(rgb, "jpeg")
    small = image_codec.compressed_to_rgb(fmt, data, reduce=8)
    assert small.shape == (135, 240, 3)
    with pytest.raises(ValueError, match="reduce"):
        image_codec.compressed_to_rgb(fmt, data, reduce=3)


def test_replay_cli_params_typed_like_ros_args_and_strings_stay_strings():
    from ddrive_ros.commands.replay import parse_params
    from ddrive_ros.ros.node_process import param_text

    params = parse_params(["planning_rate_hz:=10", "tau:=0.5", "warmup:=false", "decoder:=diffusion"])
    assert params == {"planning_rate_hz": 10, "tau": 0.5, "warmup": False, "decoder": "diffusion"}
    # on the node's command line a string is quoted, so a numeric checkpoint name stays a name
    assert param_text("123") == "'123'" and param_text(10) == "10" and param_text(False) == "false"
