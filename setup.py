"""ament_python package ddrive_ros: builds with `colcon build` and installs with pip."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "ddrive_ros"


def tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries that install `folder` under share/ddrive_ros, keeping sub-folders."""
    entries: dict[str, list[str]] = {}
    for path in glob(f"{folder}/**/*", recursive=True):
        if "." in path.rsplit("/", 1)[-1] or path.endswith("README"):
            sub = path.rsplit("/", 1)[0]
            entries.setdefault(f"share/{PACKAGE}/{sub}", []).append(path)
    return sorted(entries.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *tree("launch"),
        *tree("config"),
        *tree("models"),
    ],
    include_package_data=True,
    zip_safe=False,
    maintainer="ddrive_ros maintainers",
    maintainer_email="ddrive-ros@example.com",
    description="Discrete-diffusion driving planner (block-causal masked diffusion VLA) for ROS 2",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "ddrive = ddrive_ros.cli:main",
            "ddrive_planner = ddrive_ros.ros.node:main",
            "ddrive_planner_managed = ddrive_ros.ros.lifecycle_node:main",
        ],
    },
)
