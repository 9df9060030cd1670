"""rosbag2 I/O over rosbags (no rclpy): topics, the image codec, calibration, ground truth, the bag -> Sample extractor."""
