"""A live sensor feed for node tests and benchmarks: three cameras + odometry + navigation from
their own process, stamped with the wall clock, as a vehicle's drivers would publish them.

    python -m ddrive_ros.ros.feed --width 640 --height 360 --camera-hz 10 --odom-hz 50 \
        --side-delay-max 0.04 --duration 30 [--jpeg]

The front camera fires first; each side camera is stamped and published a random 0..side-delay-max
seconds later (real cameras are not triggered together), so the node's sync must take the newest
complete set. Images are procedural (sky, road, moving dashes), odometry an arc at constant speed.
Topics are the package's bag topics (`ddrive_ros.bags.topics`), best-effort cameras, reliable odometry.
"""
from __future__ import annotations

import argparse
import logging
import math
import random
import time
from dataclasses import dataclass


from ddrive_ros.bags import image_codec
from ddrive_ros.bags import topics as T
from ddrive_ros.bags.simple_drive import procedural_image
from ddrive_ros.observation import CAMERAS
from ddrive_ros.trajectory import yaw_to_quaternion

log = logging.getLogger(__name__)


@dataclass
class FeedOptions:
    width: int = 160
    height: int = 96
    camera_hz: float = 10.0
    odom_hz: float = 50.0
    speed: float = 8.0
    yaw_rate: float = 0.05
    side_delay_max: float = 0.0  # seconds; each side frame lags the front by U(0, this)
    jpeg: bool = False
    duration: float = 30.0
    nav_command: str = "FOLLOW_LANE"
    seed: int = 0
    frames: int = 20  # distinct procedural frames per camera, made once (the feed must not be the bottleneck)


def run(opts: FeedOptions) -> dict[str, int]:
    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image
    from std_msgs.msg import String

    from ddrive_ros.ros.convert import to_stamp

    rclpy.init()
    node = rclpy.create_node("ddrive_feed")
    best_effort = QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST, depth=2)
    reliable = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=10)
    img_type = CompressedImage if opts.jpeg else Image
    cams = {c: node.create_publisher(img_type, T.image_topic(c, opts.jpeg), best_effort) for c in CAMERAS}
    odom_pub = node.create_publisher(Odometry, T.TOPIC_ODOM, reliable)
    nav_pub = node.create_publisher(String, T.TOPIC_NAV, reliable)

    # pre-built messages, only stamps change: the feed's own cost stays small next to the node's
    msgs: dict[str, list] = {c: [] for c in CAMERAS}
    for ci, cam in enumerate(CAMERAS):
        for k in range(opts.frames):
            rgb = procedural_image(k / opts.camera_hz, ci, opts.height, opts.width, k * 0.8)
            if opts.jpeg:
                m = CompressedImage()
                m.format, data = image_codec.rgb_to_compressed(rgb, "jpeg", 85)
                m.data = data.tobytes()
            else:
                m = Image()
                m.encoding, m.height, m.width, m.step, data = image_codec.rgb_to_raw(rgb)
                m.data = data.tobytes()
            m.header.frame_id = T.camera_frame(cam)
            msgs[cam].append(m)
    rng = random.Random(opts.seed)
    counts = {"frames": 0, "odometry": 0}
    t_start = time.time()
    next_cam, next_odom, next_nav = t_start, t_start, t_start
    frame = 0
    pending: list[tuple[float, str, float]] = []  # (publish at, camera, stamp)
    odom = Odometry()
    odom.header.frame_id, odom.child_frame_id = T.ODOM_FRAME, T.BASE_FRAME
    try:
        while time.time() - t_start < opts.duration:
            now = time.time()
            if now >= next_cam:
                pending.append((now, "front", now))
                for cam in CAMERAS:
                    if cam != "front":
                        d = rng.uniform(0.0, opts.side_delay_max)
                        pending.append((now + d, cam, now + d))
                next_cam += 1.0 / opts.camera_hz
                frame += 1
            for item in sorted(pending):
                at, cam, stamp = item
                if at <= time.time():
                    m = msgs[cam][frame % opts.frames]
                    m.header.stamp = to_stamp(stamp)
                    cams[cam].publish(m)
                    counts["frames"] += 1
                    pending.remove(item)
            if now >= next_odom:
                t = now - t_start
                yaw = opts.yaw_rate * t
                r = opts.speed / opts.yaw_rate
                odom.header.stamp = to_stamp(now)
                odom.pose.pose.position.x, odom.pose.pose.position.y = r * math.sin(yaw), r * (1 - math.cos(yaw))
                qx, qy, qz, qw = yaw_to_quaternion(yaw)
                o = odom.pose.pose.orientation
                o.x, o.y, o.z, o.w = qx, qy, qz, qw
                odom.twist.twist.linear.x, odom.twist.twist.angular.z = opts.speed, opts.yaw_rate
                odom_pub.publish(odom)
                counts["odometry"] += 1
                next_odom += 1.0 / opts.odom_hz
            if now >= next_nav:
                nav_pub.publish(String(data=opts.nav_command))
                next_nav += 1.0
            wake = min([next_cam, next_odom] + [a for a, _, _ in pending])
            time.sleep(max(0.0, min(wake - time.time(), 0.005)))
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in FeedOptions.__dataclass_fields__.values():
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, action="store_true")
        else:
            kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            p.add_argument(flag, type=kind, default=f.default)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    counts = run(FeedOptions(**vars(args)))
    log.info("feed published %s", counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
