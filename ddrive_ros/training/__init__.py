"""ddrive_ros.training"""
