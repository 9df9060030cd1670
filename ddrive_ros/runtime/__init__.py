"""ddrive_ros.runtime"""
