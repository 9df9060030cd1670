"""Ground truth from a bag's own odometry: where the ego actually went after each plan."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.image_codec import stamp_to_ns
from ddrive_ros.bags.io import deserialize, read_messages
from ddrive_ros.observation_recipe import EgoTrack
from ddrive_ros.trajectory import quaternion_to_yaw


def odometry_track(bag: str | Path, topic: str = T.TOPIC_ODOM) -> EgoTrack | None:
    """The bag's finite odometry messages (by header stamp) as an EgoTrack; None without any."""
    rows = []
    for _t, mtype, _ns, raw in read_messages(bag, {topic}):
        msg = deserialize(raw, mtype)
        p, q, tw = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist
        row = (stamp_to_ns(msg.header.stamp) * 1e-9, p.x, p.y, quaternion_to_yaw(q.x, q.y, q.z, q.w),
               tw.linear.x, tw.angular.z)
        if np.all(np.isfinite(row)):
            rows.append(row)
    return EgoTrack.from_rows(rows) if rows else None


def future_in_ego(track: EgoTrack | None, t0: float, times: np.ndarray) -> np.ndarray | None:
    """Positions at t0 + times in the ego frame at t0, or None where the odometry does not cover them."""
    if track is None or len(track.t) < 2 or t0 < track.start or t0 + times[-1] > track.end + 1e-6:
        return None
    return track.in_ego_frame(t0, t0 + np.asarray(times, dtype=float))
