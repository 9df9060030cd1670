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
    except (ImportError, LookupError):  # no ament index outside a ROS install, or the package not in it
        return source


def config_file(kind: str, name_or_path: str | Path, what: str) -> Path:
    """A YAML file: a path as given, or `config/<kind>/<name>.yaml`; a clear error listing the known names."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = share_dir() / "config" / kind / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (share_dir() / "config" / kind).glob("*.yaml"))
        raise FileNotFoundError(f"{what} {path} not found (known {what}s: {', '.join(known)})")
    return path
