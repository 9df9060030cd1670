"""Start the ddrive_planner node: `ros2 launch ddrive_ros ddrive_planner.launch.py checkpoint:=... use_sim_time:=true`."""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    share = get_package_share_directory("ddrive_ros")
    params_file = LaunchConfiguration("params_file")
    checkpoint = LaunchConfiguration("checkpoint")
    use_sim_time = LaunchConfiguration("use_sim_time")
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "planner.yaml"),
                              description="ROS parameters file of the planner node"),
        DeclareLaunchArgument("checkpoint", default_value="fast_ddrive_tiny",
                              description="checkpoint folder, shipped model name, or random:tiny:fast_ddrive"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="use /clock (bag replay)"),
        DeclareLaunchArgument("camera_left_front", default_value="/camera/left_front/image_raw",
                              description="left-front camera topic (remapped)"),
        DeclareLaunchArgument("camera_front", default_value="/camera/front/image_raw",
                              description="front camera topic (remapped)"),
        DeclareLaunchArgument("camera_right_front", default_value="/camera/right_front/image_raw",
                              description="right-front camera topic (remapped)"),
        Node(
            package="ddrive_ros",
            executable="ddrive_planner",
            name="ddrive_planner",
            output="screen",
            parameters=[params_file, {
                "checkpoint": checkpoint,
                "use_sim_time": ParameterValue(use_sim_time, value_type=bool),
            }],
            remappings=[
                ("/camera/left_front/image_raw", LaunchConfiguration("camera_left_front")),
                ("/camera/front/image_raw", LaunchConfiguration("camera_front")),
                ("/camera/right_front/image_raw", LaunchConfiguration("camera_right_front")),
            ],
        ),
    ])
