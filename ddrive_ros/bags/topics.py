"""The bag layout both the writer and the extractor agree on: topics, types, frames, clocks."""
from __future__ import annotations


IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
ODOMETRY = "nav_msgs/msg/Odometry"
STRING = "std_msgs/msg/String"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"

TOPIC_ODOM = "/odom"
TOPIC_NAV = "/navigation/command"
TOPIC_OBSTACLES = "/perception/obstacle_boxes"  # visualization_msgs/MarkerArray, optional (reflect: safety)
TOPIC_LABELS = "/ddrive/labels"  # JSON of the label plan sections, stamped with the camera frame
TOPIC_EPISODE = "/ddrive/episode"  # JSON {"event": "start" | "end", "episode", "seed", ...}
TOPIC_TF_STATIC = "/tf_static"

ODOM_FRAME, BASE_FRAME = "odom", "base_link"
BAG_START_S = 1000.0  # first stamp of a written bag: stamps are never zero
EPISODE_GAP_S = 2.0  # silence between episodes on the bag's timeline


def image_topic(camera: str, compressed: bool = False) -> str:
    return f"/camera/{camera}/image_raw" + ("/compressed" if compressed else "")


def camera_info_topic(camera: str) -> str:
    return f"/camera/{camera}/camera_info"


def camera_frame(camera: str) -> str:
    return f"camera_{camera}"

