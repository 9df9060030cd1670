"""The ament_python package: package.xml is valid and declares what set-up installs; setup.py installs share files."""
from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# rosdep keys package.xml may use: ROS packages of Jazzy and keys of rosdistro's rosdep/python.yaml
ROSDEP_KEYS = {
    "rclpy", "launch", "launch_ros", "ament_index_python", "rcl_interfaces", "builtin_interfaces", "rosgraph_msgs",
    "lifecycle_msgs", "std_msgs", "sensor_msgs", "nav_msgs", "geometry_msgs", "visualization_msgs",
    "diagnostic_msgs", "python3-numpy", "python3-yaml", "python3-opencv", "python3-tqdm", "python3-matplotlib",
    "python3-pytest",
}
# no rosdep key: pip into the venv (requirements-vehicle.txt)
PIP_ONLY = {"torch", "onnx", "onnxruntime-gpu", "safetensors", "rosbags"}


def requirement_names(name: str = "requirements.txt") -> list[str]:
    names = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.append(re.split(r"[\[<>=~! ]", line)[0].lower())
    return names


def test_package_xml_uses_only_rosdep_keys_and_names_every_runtime_dependency():
    root = ET.parse(ROOT / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == "ddrive_ros"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for tag in ("exec_depend", "test_depend", "depend", "build_depend", "buildtool_depend")
            for e in root.findall(tag)}
    assert deps <= ROSDEP_KEYS, f"not rosdep keys: {deps - ROSDEP_KEYS}"
    exec_deps = {e.text for e in root.findall("exec_depend")}
    # what the node, the lifecycle node, replay and the launch files import
    assert {"rclpy", "launch", "launch_ros", "ament_index_python", "rcl_interfaces", "builtin_interfaces",
            "rosgraph_msgs", "lifecycle_msgs", "sensor_msgs", "nav_msgs", "geometry_msgs", "visualization_msgs",
            "diagnostic_msgs", "std_msgs", "python3-numpy", "python3-yaml", "python3-opencv"} <= exec_deps
    # the vehicle's pip list is exactly what rosdep cannot give
    assert set(requirement_names("requirements-vehicle.txt")) == PIP_ONLY
    constraints = (ROOT / "constraints-vehicle.txt").read_text()
    assert "numpy<2" in constraints and "opencv-python-headless<0" in constraints


def test_setup_installs_launch_config_models_and_the_ament_marker():
    out = subprocess.run([sys.executable, "-c", "import runpy, setuptools, json\n"
                          "captured = {}\n"
                          "setuptools.setup = lambda **kw: captured.update(kw)\n"
                          "runpy.run_path('setup.py')\n"
                          "print(json.dumps(captured['data_files']))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    import json

    files = {dest: srcs for dest, srcs in json.loads(out)}
    assert "resource/ddrive_ros" in files["share/ament_index/resource_index/packages"]
    assert "package.xml" in files["share/ddrive_ros"]
    assert any(d.startswith("share/ddrive_ros/launch") for d in files)
    assert any("planner.yaml" in s for d, srcs in files.items() for s in srcs)
    assert any("fast_ddrive.yaml" in s for srcs in files.values() for s in srcs)
    assert (ROOT / "resource" / "ddrive_ros").is_file()


def test_ci_runs_exactly_the_readme_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make setup" in ci and "make test" in ci
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
