"""The ament_python package: package.xml is valid and declares what set-up installs; setup.py installs share files."""
from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# requirements.txt name -> the rosdep key package.xml uses for it
ROSDEP_KEYS = {
    "torch": "python3-pytorch-pip", "numpy": "python3-numpy", "pyyaml": "python3-yaml",
    "opencv-python-headless": "python3-opencv", "onnx": "python3-onnx-pip", "onnxruntime-gpu": "python3-onnxruntime-pip",
    "rosbags": "python3-rosbags-pip", "safetensors": "python3-safetensors", "tqdm": "python3-tqdm",
    "matplotlib": "python3-matplotlib", "ros-jazzy-rclpy": "rclpy", "ros-jazzy-sensor-msgs": "sensor_msgs",
    "ros-jazzy-nav-msgs": "nav_msgs", "ros-jazzy-geometry-msgs": "geometry_msgs",
    "ros-jazzy-visualization-msgs": "visualization_msgs", "ros-jazzy-diagnostic-msgs": "diagnostic_msgs",
    "ros-jazzy-std-msgs": "std_msgs", "pytest": "python3-pytest", "hypothesis": "python3-hypothesis",
}


def requirement_names() -> list[str]:
    names = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.append(re.split(r"[\[<>=~! ]", line)[0].lower())
    return names


def test_package_xml_is_format_3_and_declares_every_dependency_setup_installs():
    root = ET.parse(ROOT / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == "ddrive_ros"
    assert root.find("export/build_type").text == "ament_python"
    exec_deps = {e.text for e in root.findall("exec_depend")}
    test_deps = {e.text for e in root.findall("test_depend")}
    for name in requirement_names():
        assert name in ROSDEP_KEYS, f"requirements.txt has {name}; map it to a rosdep key in package.xml and here"
        key = ROSDEP_KEYS[name]
        assert key in exec_deps | test_deps, f"package.xml lacks {key} (for {name})"
    assert {"rclpy", "sensor_msgs", "nav_msgs", "geometry_msgs", "visualization_msgs", "diagnostic_msgs", "std_msgs"} <= exec_deps
    assert "python3-pytest" in test_deps


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
