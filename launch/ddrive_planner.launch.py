"""Start the ddrive_planner node: `ros2 launch ddrive_ros ddrive_planner.launch.py checkpoint:=... use_sim_time:=true`.

The node's topics are node-relative (~/input/..., ~/output/...); the arguments below map the inputs
onto your sensors. Set `camera_type:=compressed` to subscribe to the `camera_*_compressed` topics.
`managed:=true` starts the lifecycle variant (configure and activate it with `ros2 lifecycle set`).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

CAMERAS = ("left_front", "front", "right_front")


def generate_launch_description():
    share = get_package_share_directory("ddrive_ros")
    arg = LaunchConfiguration
    parameters = [arg("params_file"), {
        # a string whatever it looks like (a numeric folder name must not become an int)
        "checkpoint": ParameterValue(arg("checkpoint"), value_type=str),
        "camera_type": ParameterValue(arg("camera_type"), value_type=str),
        "use_sim_time": ParameterValue(arg("use_sim_time"), value_type=bool),
    }]
    remappings = [("~/input/odometry", arg("odometry")), ("~/input/navigation", arg("navigation")),
                  ("~/input/obstacles", arg("obstacles"))]
    for cam in CAMERAS:
        remappings.append((f"~/input/camera/{cam}/image", arg(f"camera_{cam}")))
        remappings.append((f"~/input/camera/{cam}/image/compressed", arg(f"camera_{cam}_compressed")))
    common = dict(package="ddrive_ros", name="ddrive_planner", namespace="", output="screen",
                  parameters=parameters, remappings=remappings)
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "planner.yaml"),
                              description="ROS parameters file of the planner node (keyed /**)"),
        DeclareLaunchArgument("checkpoint", default_value="fast_ddrive_tiny",
                              description="checkpoint folder, shipped model name, or random:tiny:fast_ddrive"),
        DeclareLaunchArgument("camera_type", default_value="raw", description="raw | compressed"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="use /clock (bag replay)"),
        DeclareLaunchArgument("managed", default_value="false", description="start the lifecycle (managed) node"),
        *[DeclareLaunchArgument(f"camera_{cam}", default_value=f"/camera/{cam}/image_raw",
                                description=f"{cam} camera, sensor_msgs/Image") for cam in CAMERAS],
        *[DeclareLaunchArgument(f"camera_{cam}_compressed", default_value=f"/camera/{cam}/image_raw/compressed",
                                description=f"{cam} camera, sensor_msgs/CompressedImage") for cam in CAMERAS],
        DeclareLaunchArgument("odometry", default_value="/odom", description="nav_msgs/Odometry"),
        DeclareLaunchArgument("navigation", default_value="/navigation/command",
                              description="std_msgs/String navigation command"),
        DeclareLaunchArgument("obstacles", default_value="/perception/obstacle_boxes",
                              description="visualization_msgs/MarkerArray CUBE boxes in the ego frame (reflect: safety)"),
        Node(executable="ddrive_planner", condition=UnlessCondition(arg("managed")), **common),
        LifecycleNode(executable="ddrive_planner_managed", condition=IfCondition(arg("managed")), **common),
    ])
