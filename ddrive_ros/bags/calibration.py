"""Camera calibration recorded in a bag: intrinsics from `/camera/<name>/camera_info`, mounts from
`/tf_static` (base_link -> camera frame). What drawing a plan into a recorded image needs."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.io import bag_topics, deserialize, read_messages
from ddrive_ros.camera import CameraModel, quaternion_to_rotation
from ddrive_ros.observation import CAMERAS

log = logging.getLogger(__name__)


def cameras_from_bag(bag: str | Path) -> dict[str, CameraModel]:
    """name -> CameraModel for every camera with both a CameraInfo and a base_link mount in the bag.
    Cameras without them are left out (and logged): their images are shown without projections."""
    topics = bag_topics(bag)
    wanted = {T.camera_info_topic(c): c for c in CAMERAS if T.camera_info_topic(c) in topics}
    infos: dict[str, object] = {}
    mounts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for topic, mtype, _t, raw in read_messages(bag, set(wanted) | {T.TOPIC_TF_STATIC}):
        msg = deserialize(raw, mtype)
        if topic == T.TOPIC_TF_STATIC:
            for tf in msg.transforms:
                if tf.header.frame_id == T.BASE_FRAME:
                    tr, q = tf.transform.translation, tf.transform.rotation
                    mounts[tf.child_frame_id] = (np.array([tr.x, tr.y, tr.z]), quaternion_to_rotation(q.x, q.y, q.z, q.w))
        elif wanted[topic] not in infos:
            infos[wanted[topic]] = msg
    out = {}
    for cam, info in infos.items():
        frame = info.header.frame_id or T.camera_frame(cam)
        if frame not in mounts:
            log.info("bag %s: camera %s has CameraInfo but no /tf_static mount for %s; drawn without projection",
                     bag, cam, frame)
            continue
        pos, rot = mounts[frame]
        k = np.asarray(info.k, dtype=float)
        out[cam] = CameraModel(cam, int(info.width), int(info.height), float(k[0]), float(k[4]), float(k[2]),
                               float(k[5]), float(pos[0]), float(pos[1]), float(pos[2]),
                               mount_rotation=tuple(float(v) for v in rot.ravel()))
    missing = [c for c in CAMERAS if c not in out]
    if missing:
        log.info("bag %s: no calibration for cameras %s", bag, missing)
    return out
