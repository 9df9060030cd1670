"""ddrive_ros.model"""
