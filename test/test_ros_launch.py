"""Launch files and parameters file agree with the node (no `launch` package here).

- launch/ddrive_planner.launch.py is executed against recording stand-ins for `launch`, `launch_ros`
  and `ament_index_python` (only constructor arguments are recorded; nothing is launched), so its
  arguments, parameters and remappings are read as the real launch system would get them;
- launch/ddrive_planner.launch.yaml parses and names the same arguments, parameters and remappings;
- the remapped names are the ones the node subscribes to, and every parameter set in
  config/planner.yaml (keyed /**) or the launch files is declared by the node with the same type,
  inside its range, with the read-only flag of ddrive_ros/ros/params.py (the node runs in-process).
"""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import yaml

from ddrive_ros.observation import CAMERAS
from ddrive_ros.ros import interface as I
from ddrive_ros.ros.domain_id import pid_domain_id

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_PY = ROOT / "launch" / "ddrive_planner.launch.py"
LAUNCH_YAML = ROOT / "launch" / "ddrive_planner.launch.yaml"
PARAMS = ROOT / "config" / "planner.yaml"
BUILTIN = {"use_sim_time"}
INPUTS = {I.camera_input(c, z) for c in CAMERAS for z in (False, True)} | {I.INPUT_ODOMETRY, I.INPUT_NAVIGATION, I.INPUT_OBSTACLES}


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _launch_description() -> _Recorded:
    """generate_launch_description() with every launch class replaced by a recorder."""
    names = {"launch": ["LaunchDescription"], "launch.actions": ["DeclareLaunchArgument"],
             "launch.conditions": ["IfCondition", "UnlessCondition"], "launch.substitutions": ["LaunchConfiguration"],
             "launch_ros.actions": ["LifecycleNode", "Node"], "launch_ros.parameter_descriptions": ["ParameterValue"]}
    saved = {m: sys.modules.get(m) for m in [*names, "launch_ros", "ament_index_python", "ament_index_python.packages"]}
    try:
        for mod, classes in names.items():
            sys.modules[mod] = types.SimpleNamespace(**{c: type(c, (_Recorded,), {}) for c in classes})
        sys.modules["launch_ros"] = types.SimpleNamespace()
        sys.modules["ament_index_python"] = types.SimpleNamespace()
        sys.modules["ament_index_python.packages"] = types.SimpleNamespace(
            get_package_share_directory=lambda pkg: f"/share/{pkg}")
        spec = importlib.util.spec_from_file_location("ddrive_launch", LAUNCH_PY)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.generate_launch_description()
    finally:
        for m, v in saved.items():
            if v is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = v


def _py_parts():
    ld = _launch_description()
    entities = ld.args[0]
    args = {e.args[0]: e.kwargs.get("default_value") for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    nodes = [e for e in entities if type(e).__name__ in ("Node", "LifecycleNode")]
    return args, nodes


def _yaml_launch() -> list:
    return yaml.safe_load(LAUNCH_YAML.read_text())["launch"]


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _file_params() -> dict[str, object]:
    doc = yaml.safe_load(PARAMS.read_text())
    assert list(doc) == ["/**"], "the parameters file is keyed /** so a renamed or namespaced node reads it"
    return _flatten(doc["/**"]["ros__parameters"])


def test_python_launch_remaps_every_input_and_wraps_strings():
    args, nodes = _py_parts()
    assert {n.kwargs["executable"] for n in nodes} == {"ddrive_planner", "ddrive_planner_managed"}
    for node in nodes:
        assert node.kwargs["name"] == I.NODE_NAME and node.kwargs["package"] == "ddrive_ros"
        remaps = dict(node.kwargs["remappings"])
        assert set(remaps) == INPUTS  # raw and compressed cameras, odometry, navigation
        for name, target in remaps.items():
            assert type(target).__name__ == "LaunchConfiguration" and target.args[0] in args
        # the launch argument defaults are the package's bag topics
        defaults = {name: args[target.args[0]] for name, target in remaps.items()}
        assert defaults == I.bag_remaps(False) | I.bag_remaps(True)
        params_file, inline = node.kwargs["parameters"]
        assert params_file.args[0] == "params_file" and args["params_file"] == "/share/ddrive_ros/config/planner.yaml"
        # checkpoint stays a string whatever it looks like; use_sim_time is a bool
        assert inline["checkpoint"].kwargs["value_type"] is str
        assert inline["use_sim_time"].kwargs["value_type"] is bool


def test_yaml_launch_names_the_same_arguments_and_remaps():
    args, nodes = _py_parts()
    entries = _yaml_launch()
    assert {e["arg"]["name"] for e in entries if "arg" in e} == set(args)
    assert {e["arg"]["name"]: str(e["arg"]["default"]) for e in entries if "arg" in e and "params_file" != e["arg"]["name"]} \
        == {k: v for k, v in args.items() if k != "params_file"}
    node = next(e["node"] for e in entries if "node" in e)
    assert node["pkg"] == "ddrive_ros" and node["exec"] == "ddrive_planner" and node["name"] == I.NODE_NAME
    assert {p["name"] for p in node["param"] if "name" in p} == set(nodes[0].kwargs["parameters"][1])
    assert {r["from"] for r in node["remap"]} == INPUTS
    py_remaps = {k: v.args[0] for k, v in nodes[0].kwargs["remappings"]}
    assert {r["from"]: r["to"] for r in node["remap"]} == {k: f"$(var {v})" for k, v in py_remaps.items()}


@pytest.fixture(scope="module")
def node_parameters():
    """(declared name -> type) and the node, started in-process with config/planner.yaml as its params file."""
    import rclpy
    from rclpy.parameter import Parameter

    from ddrive_ros.ros.node import PlannerNode

    ctx = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(PARAMS)], context=ctx, domain_id=pid_domain_id(4))
    try:
        node = PlannerNode(context=ctx, parameter_overrides=[
            Parameter("checkpoint", value="random:tiny:fast_ddrive"), Parameter("warmup", value=False)])
        try:
            names = node.list_parameters([], 10).names
            yield {n: node.get_parameter(n).type_ for n in names}, node
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)


def test_node_subscribes_to_the_remapped_names(node_parameters):
    _, node = node_parameters
    subscribed = {s.topic_name for s in node.subscriptions}
    raw = {I.resolve(n) for n in INPUTS if not n.endswith("/compressed")}
    assert raw <= subscribed, (raw, subscribed)
    published = {p.topic_name for p in node.publishers}
    assert {I.resolve(n) for n in I.OUTPUT_TYPES} <= published


def test_params_file_parameters_declared_with_same_type_range_and_flag(node_parameters):
    from rclpy.parameter import Parameter

    from ddrive_ros.ros.params import PARAMETERS

    declared, node = node_parameters
    params = _file_params()
    assert set(PARAMETERS) == set(params) - BUILTIN  # the file sets every parameter: one place for the defaults
    for name, value in params.items():
        assert name in declared, f"{name} in {PARAMS.name} is not declared by the node"
        assert declared[name] == Parameter.Type.from_parameter_value(value), name
        spec = PARAMETERS[name]
        desc = node.describe_parameter(name)
        assert desc.description and desc.read_only == spec.read_only, name
        if spec.range:
            assert spec.range[0] <= value <= spec.range[1], name
        if spec.choices:
            assert value in spec.choices, name
    assert node.get_parameter("planning_rate_hz").value == params["planning_rate_hz"]
    assert node.get_parameter("checkpoint").value == "random:tiny:fast_ddrive"  # the override beats the file


def test_launch_parameters_declared(node_parameters):
    from rclpy.parameter import Parameter

    declared, _ = node_parameters
    _, nodes = _py_parts()
    for name in nodes[0].kwargs["parameters"][1]:
        assert name in declared
    assert declared["checkpoint"] == Parameter.Type.STRING
    assert declared["use_sim_time"] == Parameter.Type.BOOL


def test_rviz_config_shows_the_node_outputs_cameras_both_ways_and_odometry():
    doc = yaml.safe_load((ROOT / "config" / "ddrive.rviz").read_text())
    displays = doc["Visualization Manager"]["Displays"]
    topics = {d["Topic"]["Value"] for d in displays if "Topic" in d}
    assert {I.resolve(I.OUTPUT_PATH), I.resolve(I.OUTPUT_MARKERS), "/odom"} <= topics
    hints = {(d["Topic"]["Value"], d.get("Transport Hint")) for d in displays if d["Class"].endswith("/Image")}
    assert hints == {(f"/camera/{c}/image_raw", h) for c in CAMERAS for h in ("raw", "compressed")}


def test_markers_expire():
    from ddrive_ros.ros.markers import plan_markers
    import numpy as np

    traj = np.array([[0.5, 1.0, 0.0, 0.0, 2.0], [1.0, 2.0, 0.0, 0.0, 2.0]])
    arr = plan_markers(traj, None, None, {}, 10.0, "base_link", lifetime_s=1.5)
    lifetimes = {(m.lifetime.sec, m.lifetime.nanosec) for m in arr.markers[1:]}
    assert lifetimes == {(1, 500_000_000)}  # a dead node's plan disappears from RViz
