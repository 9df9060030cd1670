"""ddrive_ros.ros"""
