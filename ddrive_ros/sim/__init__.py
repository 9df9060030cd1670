"""The synthetic driving world (numpy + OpenCV only; never imported by ddrive_ros.ros):

    Episode(seed, duration_s)            simulate one scenario at 20 Hz with the expert driving (world.py)
    make_sample(episode, t0_index)       one Sample (sample.py), through the shared observation recipe
    iter_samples / samples_from_world    Samples of many seeded episodes
    Renderer, CameraModel, default_cameras
    bag_writer.write_bag(out, seeds)     episodes as a rosbag2 folder (over ddrive_ros.bags)
"""
from ddrive_ros.sim.camera import CameraModel, default_cameras
from ddrive_ros.sim.labels import CRITICAL_OBJECTS, THRESHOLDS, LabelThresholds, load_words
from ddrive_ros.sim.render import Renderer, camera_strip
from ddrive_ros.sample import Sample
from ddrive_ros.sim.sample import episode_seeds, iter_samples, make_sample, samples_from_world
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
