"""The node's topic names, node-relative in the Autoware style, so an integrator remaps them.

The node subscribes and publishes only these names; `~` expands to the node's name (and namespace),
so `ddrive_planner` publishes `~/output/plan` as `/ddrive_planner/output/plan`. Launch files and
`NodeProcess` map the inputs onto the sensor topics (`camera_remaps`, `bag_remaps`).
"""
from __future__ import annotations

from ddrive_ros.bags import topics as T
from ddrive_ros.observation import CAMERAS

NODE_NAME = "ddrive_planner"

INPUT_ODOMETRY = "~/input/odometry"  # nav_msgs/Odometry
INPUT_NAVIGATION = "~/input/navigation"  # std_msgs/String
INPUT_OBSTACLES = "~/input/obstacles"  # visualization_msgs/MarkerArray, CUBE boxes in the ego frame (optional)
OUTPUT_PATH = "~/output/path"  # nav_msgs/Path
OUTPUT_TRAJECTORY = "~/output/trajectory"  # autoware_planning_msgs/Trajectory, only when importable
OUTPUT_PLAN = "~/output/plan"  # std_msgs/String, JSON of the whole plan
OUTPUT_META = "~/output/meta_behavior"  # std_msgs/String, JSON
OUTPUT_MARKERS = "~/output/markers"  # visualization_msgs/MarkerArray
DEBUG_PROCESSING_MS = "~/debug/processing_time_ms"  # std_msgs/Float64: tick hand-over to published plan
DEBUG_CYCLIC_MS = "~/debug/cyclic_time_ms"  # std_msgs/Float64: time between two published plans
DEBUG_LATENCY = "~/debug/latency"  # std_msgs/String, JSON per-stage times of the last plan
DIAGNOSTICS = "/diagnostics"


def camera_input(camera: str, compressed: bool = False) -> str:
    """`~/input/camera/<camera>/image` (sensor_msgs/Image) or `.../image/compressed` (CompressedImage)."""
    if camera not in CAMERAS:
        raise KeyError(f"unknown camera {camera!r}; expected one of {CAMERAS}")
    return f"~/input/camera/{camera}/image" + ("/compressed" if compressed else "")


def resolve(name: str, node_name: str = NODE_NAME, namespace: str = "/") -> str:
    """The absolute topic a node-relative name becomes for a node of that name and namespace."""
    if not name.startswith("~"):
        return name
    ns = namespace.rstrip("/")
    return f"{ns}/{node_name}{name[1:]}"


def bag_remaps(compressed: bool) -> dict[str, str]:
    """Node-relative inputs -> the topics of the package's bags (`ddrive_ros.bags.topics`)."""
    remaps = {camera_input(cam, compressed): T.image_topic(cam, compressed) for cam in CAMERAS}
    remaps[INPUT_ODOMETRY] = T.TOPIC_ODOM
    remaps[INPUT_NAVIGATION] = T.TOPIC_NAV
    remaps[INPUT_OBSTACLES] = T.TOPIC_OBSTACLES
    return remaps


# default output name -> message type, what replay records (resolved for the default node name)
OUTPUT_TYPES: dict[str, str] = {
    OUTPUT_PATH: "nav_msgs/msg/Path",
    OUTPUT_PLAN: "std_msgs/msg/String",
    OUTPUT_META: "std_msgs/msg/String",
    OUTPUT_MARKERS: "visualization_msgs/msg/MarkerArray",
    DEBUG_LATENCY: "std_msgs/msg/String",
    DEBUG_PROCESSING_MS: "std_msgs/msg/Float64",
    DEBUG_CYCLIC_MS: "std_msgs/msg/Float64",
    DIAGNOSTICS: "diagnostic_msgs/msg/DiagnosticArray",
}
