"""Pictures of replayed plans: the bag's three camera images with the plan (red) and the recorded
future (green) projected through the bag's own calibration, beside a bird's-eye view."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.calibration import cameras_from_bag
from ddrive_ros.bags.ground_truth import future_in_ego, odometry_track
from ddrive_ros.bags.image_codec import ImageFormatError, image_from_msg, stamp_to_ns
from ddrive_ros.bags.io import bag_topics, deserialize, read_messages
from ddrive_ros.evaluation import draw
from ddrive_ros.observation import CAMERAS
from ddrive_ros.plan import meta_text

log = logging.getLogger(__name__)


def _camera_topics(bag: str | Path) -> dict[str, str]:
    topics = bag_topics(bag)
    out = {}
    for cam in CAMERAS:
        for compressed in (False, True):
            if T.image_topic(cam, compressed) in topics:
                out[T.image_topic(cam, compressed)] = cam
    return out


def write_frames(bag: str | Path, plans: list[dict], out: Path, n: int) -> list[str]:
    """One PNG per chosen plan (n spread over the replay) under out/frames/."""
    real = [p for p in plans if not p.get("fallback") and p.get("trajectory")]
    if not real or n <= 0:
        return []
    pick = [real[int(i)] for i in np.unique(np.linspace(0, len(real) - 1, min(n, len(real))).round())]
    want = {int(round(float(p["input_stamp"]) * 1e9)): p for p in pick}
    cam_topics = _camera_topics(bag)
    images: dict[int, dict[str, np.ndarray]] = {}
    for topic, mtype, _ns, raw in read_messages(bag, set(cam_topics)):
        msg = deserialize(raw, mtype)
        key = stamp_to_ns(msg.header.stamp)
        if key in want:
            try:
                images.setdefault(key, {})[cam_topics[topic]] = image_from_msg(msg)
            except ImageFormatError as e:
                log.info("frame %d of %s not drawn: %s", key, topic, e)
    cameras = cameras_from_bag(bag)
    track = odometry_track(bag)
    written = []
    for i, (key, plan) in enumerate(sorted(want.items())):
        traj = np.array([[r["t"], r["x"], r["y"]] for r in plan["trajectory"]], dtype=float)
        truth = future_in_ego(track, key * 1e-9, traj[:, 0])
        paths = [(truth, draw.TRUTH), (traj[:, 1:3], draw.PLAN)]
        strip = draw.camera_strip([images.get(key, {}).get(c) for c in CAMERAS], [cameras.get(c) for c in CAMERAS],
                                  paths, height=160)
        rollouts = [np.asarray(r, float) for r in plan.get("rollouts", [])]
        waypoints = np.array([[w["x"], w["y"]] for w in plan.get("waypoints", [])]).reshape(-1, 2)
        scene = draw.Scene(plan=traj[:, 1:3], truth=truth, rollouts=rollouts, waypoints=waypoints,
                           title=f"t={plan['input_stamp']:.2f} s", lines=[meta_text(plan.get("future_meta_behavior")),
                                                                        "plan red, recorded future green"])
        canvas = draw.side_by_side(strip, draw.bev(scene, size=320))
        written.append(str(draw.write_png(out / "frames" / f"frame_{i:03d}.png", canvas)))
    return written
