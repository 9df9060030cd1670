"""Synthetic driving world and ROS 2 bag tools.

World side (numpy + OpenCV only):
    Episode(seed, duration_s)            simulate one scenario at 20 Hz (world.py)
    make_sample(episode, t0_index)       one training Sample (sample.py)
    iter_samples / samples_from_world    Samples of many seeded episodes
    Renderer, CameraModel, default_cameras
Bag side (needs rosbags; import the modules directly):
    ddrive_ros.sim.bag_writer.write_bag(out_dir, seeds, compressed)
    ddrive_ros.bags.reader.extract_samples(bag_dir) -> (samples, DropReport)
    ddrive_ros.bags.image_codec          pixel <-> message conversions shared with the ROS layer
"""
from ddrive_ros.sim.camera import CameraModel, default_cameras
from ddrive_ros.sim.labels import CRITICAL_OBJECTS, THRESHOLDS, LabelThresholds, load_words
from ddrive_ros.sim.render import Renderer, camera_strip
from ddrive_ros.sim.sample import Sample, episode_seeds, iter_samples, make_sample, samples_from_world
from ddrive_ros.sim.world import Episode

__all__ = [
    "CRITICAL_OBJECTS",
    "THRESHOLDS",
    "CameraModel",
    "Episode",
    "LabelThresholds",
    "Renderer",
    "Sample",
    "camera_strip",
    "default_cameras",
    "episode_seeds",
    "iter_samples",
    "load_words",
    "make_sample",
    "samples_from_world",
]
