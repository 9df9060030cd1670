"""ddrive_ros: a discrete-diffusion driving planner for ROS 2.

Layers (data flows one way): ros/ -> planner -> decoding -> runtime -> model,
with scaffold/ (schema, tokenizer, codec) and trajectory.py shared below them.
Nothing outside ros/ imports rclpy.
"""
from pathlib import Path

__version__ = "0.1.0"

PACKAGE_ROOT = Path(__file__).resolve().parent


def share_dir() -> Path:
    """Folder holding config/, launch/ and models/: the source tree, or share/ddrive_ros when installed."""
    source = PACKAGE_ROOT.parent
    if (source / "config" / "schema").is_dir():
        return source
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory("ddrive_ros"))
    except Exception:  # noqa: BLE001 - no ament index outside a ROS install
        return source
