"""Launch files and parameters file agree with the node (no `launch` package needed).

- launch/ddrive_planner.launch.py parses and declares the launch arguments;
- launch/ddrive_planner.launch.yaml parses and names the same arguments;
- every parameter set in config/planner.yaml or the launch files is declared by the node with the same
  type (the node is started in-process with rclpy, its declared parameters listed and compared).
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_PY = ROOT / "launch" / "ddrive_planner.launch.py"
LAUNCH_YAML = ROOT / "launch" / "ddrive_planner.launch.yaml"
PARAMS = ROOT / "config" / "planner.yaml"
EXPECTED_ARGS = {"params_file", "checkpoint", "use_sim_time", "camera_left_front", "camera_front", "camera_right_front"}
BUILTIN = {"use_sim_time"}


def _py_launch_args() -> set[str]:
    tree = ast.parse(LAUNCH_PY.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "DeclareLaunchArgument":
            names.add(ast.literal_eval(node.args[0]))
    return names


def _py_node_params() -> dict[str, object]:
    """Parameter names set inline (the dict in Node(parameters=[params_file, {...}]))."""
    tree = ast.parse(LAUNCH_PY.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Node":
            kw = {k.arg: k.value for k in node.keywords}
            assert ast.literal_eval(kw["package"]) == "ddrive_ros"
            assert ast.literal_eval(kw["executable"]) == "ddrive_planner"
            params = [e for e in kw["parameters"].elts if isinstance(e, ast.Dict)]
            return {ast.literal_eval(k): v for d in params for k, v in zip(d.keys, d.values)}
    raise AssertionError("no Node(...) in the launch file")


def _yaml_launch() -> dict:
    return yaml.safe_load(LAUNCH_YAML.read_text())["launch"]


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_python_launch_declares_arguments():
    assert _py_launch_args() == EXPECTED_ARGS
    assert set(_py_node_params()) == {"checkpoint", "use_sim_time"}
    text = LAUNCH_PY.read_text()
    for topic in ("/camera/left_front/image_raw", "/camera/front/image_raw", "/camera/right_front/image_raw"):
        assert f'("{topic}", LaunchConfiguration(' in text  # remapped


def test_yaml_launch_names_the_same_arguments():
    entries = _yaml_launch()
    args = {e["arg"]["name"] for e in entries if "arg" in e}
    assert args == _py_launch_args()
    node = next(e["node"] for e in entries if "node" in e)
    assert node["pkg"] == "ddrive_ros" and node["exec"] == "ddrive_planner"
    assert {p["name"] for p in node["param"] if "name" in p} == set(_py_node_params())
    assert {r["from"] for r in node["remap"]} == {f"/camera/{c}/image_raw" for c in ("left_front", "front", "right_front")}


@pytest.fixture(scope="module")
def node_parameters():
    """(declared name -> type) of a node started in-process with config/planner.yaml as its params file."""
    import rclpy
    from rclpy.parameter import Parameter

    from ddrive_ros.ros.node import PlannerNode

    ctx = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(PARAMS)], context=ctx, domain_id=os.getpid() % 200 + 20 + 5)
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


def _expected_type(value):
    from rclpy.parameter import Parameter

    return Parameter.Type.from_parameter_value(value)


def test_params_file_parameters_declared_with_same_type(node_parameters):
    declared, node = node_parameters
    params = _flatten(yaml.safe_load(PARAMS.read_text())["ddrive_planner"]["ros__parameters"])
    assert params, "empty parameters file"
    for name, value in params.items():
        assert name in declared, f"{name} in {PARAMS.name} is not declared by the node"
        assert declared[name] == _expected_type(value), f"{name}: file {type(value).__name__}, node {declared[name]}"
    # the file's values reached the node (the override beats the file for checkpoint)
    assert node.get_parameter("planning_rate_hz").value == params["planning_rate_hz"]
    assert node.get_parameter("checkpoint").value == "random:tiny:fast_ddrive"


def test_launch_parameters_declared(node_parameters):
    from rclpy.parameter import Parameter

    declared, _ = node_parameters
    for name in _py_node_params():
        assert name in declared
    assert declared["checkpoint"] == Parameter.Type.STRING
    assert declared["use_sim_time"] == Parameter.Type.BOOL


def test_every_declared_parameter_has_a_description(node_parameters):
    from ddrive_ros.ros.node import PARAMETERS

    declared, node = node_parameters
    for name in PARAMETERS:
        desc = node.describe_parameter(name)
        assert desc.description and name in declared
    # and the shipped parameters file sets every one of them (one place for the defaults)
    params = _flatten(yaml.safe_load(PARAMS.read_text())["ddrive_planner"]["ros__parameters"])
    assert set(PARAMETERS) == set(params) - BUILTIN
