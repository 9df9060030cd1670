"""ddrive_ros.decoding"""
