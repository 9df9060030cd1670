"""The closed loop through the real node: a simulator-side rclpy session that drives
`python -m ddrive_ros.ros.node` (use_sim_time, its own ROS_DOMAIN_ID) in lockstep.

It has the simulator's `Driver` methods (begin_episode / observe / plan, see
ddrive_ros/sim/drivers.py) over plain numpy values, so the simulator calls it without knowing about
ROS and this package never imports the simulator; `ddrive sim --ros` wires the two together.

Per simulation step (`observe`): on camera steps the road users as boxes in base_link (the node's
~/input/obstacles, a MarkerArray; when the simulator bound a box source with `bind`), first so they are
in before the frame that triggers the plan; /odom (odom -> base_link, body-frame twist) and the
navigation command, the three cameras (sensor_msgs/Image rgb8) on camera steps, then /clock. Every
plan reports the age of the boxes its safety check held (stats.reflect.obstacles_age_ms); the bridge
counts the plans that checked against their own frame's boxes, an older set, or none. Lockstep: after
a camera frame the bridge waits until the node has published a plan for it (the node plans every
new front frame it can build an observation for), so the node is never busy when the next frame
comes and no frame's plan is lost to a skipped tick. The node's timer runs at 1 kHz of sim time,
so it fires on every /clock message. rclpy's executor runs ready timers before ready subscriptions,
so the tick at a frame's own /clock usually sees the previous frame; the bridge then nudges /clock
on by NUDGE_S (1.1 ms, far less than a 50 ms step) to make the timer fire again once the images are
in, and again on a back-off schedule if the node has not answered yet. The node's sensor subscriptions are best
effort, so on a loaded machine a frame's message can be lost; without a plan after RESEND_AT_S the frame's messages
go again (`resends` counts them).

Episodes follow each other on one clock: each starts EPISODE_GAP_S after the previous one ended, on a
whole second, so the node's buffers never mix two episodes and its "same anchor as last time" check
never fires, and every stamp sits on the simulator's 50 ms grid.
"""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ddrive_ros.observation import CAMERAS
from ddrive_ros.plan import MetaBehavior, Plan
from ddrive_ros.bags import topics as T
from ddrive_ros.ros import convert
from ddrive_ros.ros import interface as I
from ddrive_ros.ros.domain_id import check_domain_id, domain_id_from_env
from ddrive_ros.ros.node_process import NodeProcess
from ddrive_ros.ros.spun_node import SpunNode
from ddrive_ros.timeline import FRAME_HISTORY_S
from ddrive_ros.trajectory import yaw_to_quaternion

log = logging.getLogger(__name__)

EPISODE_GAP_S = 100.0  # s of sim time between episodes on the node's clock
START_S = 1000.0  # first episode's time zero: stamps are never zero
PLANNING_RATE_HZ = 1000.0  # the node's timer: fires on every /clock message
NUDGE_S = 0.0011  # s: clock nudge, > the timer's 1 ms period; MAX_NUDGES of them stay inside a 50 ms step
MAX_NUDGES = 40
NUDGE_AT_S = (0.02, 0.1, 0.2, 0.4, 0.7, 1.0)  # wall seconds of waiting at which to nudge; then every 0.5 s
# wall seconds of waiting at which the frame's messages go again: the node's sensor subscriptions are best effort, and on
# a loaded machine one of a frame's messages can be lost (a 100-episode run stopped so in round 21: one front and one
# right image missing, the node planning the set before for ever). A resent message the node already has is dropped
# by it as out of order, and counted there
RESEND_AT_S = (3.0, 8.0, 15.0)


@dataclass
class NodeBridgeOptions:
    checkpoint: str = "fast_ddrive_tiny"
    decoder: str = "speculative"
    rollouts: int = 1
    domain_id: int | None = None  # default: ROS_DOMAIN_ID from the environment, else pid-derived
    log_path: str | Path = "sim_node.log"
    start_timeout_s: float = 180.0  # model load + warm-up + discovery, on a loaded 2-core machine
    plan_timeout_s: float = 60.0  # one plan, wall seconds
    num_threads: int = 1  # torch threads inside the node
    reflect: str = "off"  # the node's reflect parameter (safety: checked against the boxes bound with `bind`)
    tree_rows: int = 1  # the node's tree_rows parameter (decoder speculative)
    tree_depth: int = 1  # the node's tree_depth parameter
    logit_bias: str = "checkpoint"  # the node's logit_bias parameter
    track_obstacles: bool = True  # the node's track_obstacles parameter (velocities from the boxes, set to set)
    safety_repair: str | None = None  # the node's safety_repair parameter (None: its default)
    # TEST ONLY: (seconds into the episode, camera) of one image not sent the first time, as a best-effort subscription
    # loses a message under load; the resend (RESEND_AT_S) must bring it
    drop_once: tuple[float, str] | None = None


class NodeBridge:
    def __init__(self, opts: NodeBridgeOptions) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image
        from std_msgs.msg import String
        from visualization_msgs.msg import MarkerArray

        self.opts = opts
        self.domain = check_domain_id(opts.domain_id, "domain_id") if opts.domain_id is not None else domain_id_from_env()
        params = {"use_sim_time": True, "checkpoint": opts.checkpoint, "decoder": opts.decoder,
                  "rollouts": opts.rollouts, "planning_rate_hz": PLANNING_RATE_HZ, "fallback": "none",
                  "num_threads": opts.num_threads, "reflect": opts.reflect, "tree_rows": opts.tree_rows,
                  "tree_depth": opts.tree_depth, "logit_bias": opts.logit_bias,
                  "track_obstacles": opts.track_obstacles,
                  **({"safety_repair": opts.safety_repair} if opts.safety_repair else {})}
        # the node's ~/input/* onto the topics this bridge publishes (the package's bag topics)
        self.node_proc = NodeProcess(params, self.domain, Path(opts.log_path), remaps=I.bag_remaps(False))
        self.plan_topic = I.resolve(I.OUTPUT_PLAN)
        log.info("started planner node pid %d on ROS_DOMAIN_ID %d (%s, N=%d)", self.node_proc.pid, self.domain,
                 opts.decoder, opts.rollouts)
        self._msgs = {"Image": Image, "Odometry": Odometry, "String": String, "Clock": Clock}
        self._spun = SpunNode("ddrive_sim_bridge", self.domain)
        self.node = self._spun.node
        reliable = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=50)
        self.pub_cam = {c: self.node.create_publisher(Image, T.image_topic(c), reliable) for c in CAMERAS}
        self.pub_odom = self.node.create_publisher(Odometry, T.TOPIC_ODOM, reliable)
        self.pub_nav = self.node.create_publisher(String, T.TOPIC_NAV, reliable)
        self.pub_clock = self.node.create_publisher(Clock, "/clock", reliable)
        self.pub_obstacles = self.node.create_publisher(MarkerArray, T.TOPIC_OBSTACLES, reliable)
        self._boxes_of: Callable[[], Sequence[tuple[float, ...]]] | None = None
        # plans by what their safety check held: this frame's boxes, an older set, none (reflect safety|both only)
        self.obstacle_plans = {"same_frame": 0, "older": 0, "none": 0}
        self._cv = threading.Condition()
        self._plans: dict[int, dict] = {}  # input stamp (ns) -> plan JSON
        self.node.create_subscription(String, self.plan_topic, self._on_plan, reliable)
        self._diagnostics: dict[str, str] = {}  # the node's latest diagnostics, status name -> text: named in errors
        self.node.create_subscription(DiagnosticArray, I.DIAGNOSTICS, self._on_diagnostics, reliable)
        self._spun.start()
        self.offset = START_S - EPISODE_GAP_S
        self.episode_start = 0.0
        self.last_t = 0.0
        self.clock_now = 0.0
        self.nudges = 0
        self.resends = 0  # frames sent again because no plan came for them (RESEND_AT_S)
        self._frame_msgs: list[tuple[object, object]] = []  # (publisher, message) of the frame waited for
        self._drop_once = opts.drop_once
        self.frame_sent_wall: dict[int, float] = {}
        self._last_received: float | None = None  # input stamp of the newest plan received (named in errors)
        self._last_frame_t: float | None = None  # the newest camera frame the node has planned, and its plan
        self._last_frame_plan: dict | None = None
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def _on_plan(self, msg) -> None:
        doc = json.loads(msg.data)
        if doc.get("fallback"):
            return
        seen = doc.get("stats", {}).get("reflect", {})
        with self._cv:
            self._last_received = float(doc["input_stamp"])
            if "obstacles_age_ms" in seen:
                age = seen["obstacles_age_ms"]
                self.obstacle_plans["none" if age is None else "same_frame" if abs(age) < 0.5 else "older"] += 1
            self._plans[_ns(float(doc["input_stamp"]))] = doc
            self._cv.notify_all()

    def _on_diagnostics(self, msg) -> None:
        got = {st.name: f"{st.message} ({', '.join(f'{kv.key}={kv.value}' for kv in st.values)})" for st in msg.status}
        with self._cv:
            self._diagnostics.update(got)

    def _node_state(self) -> str:
        with self._cv:
            diag = dict(self._diagnostics)
        text = "\n".join(f"  {name}: {value}" for name, value in sorted(diag.items())) or "  (none received)"
        return f"node diagnostics:\n{text}\nnode log {self.node_proc.log_path}:\n{self.node_proc.tail()}"

    def _wait_ready(self) -> None:
        t0 = time.monotonic()
        while True:
            if not self.node_proc.alive():
                raise RuntimeError(f"planner node exited with {self.node_proc.proc.returncode}:\n{self.node_proc.tail()}")
            ready_in = all(p.get_subscription_count() > 0 for p in (*self.pub_cam.values(), self.pub_odom))
            ready_out = self.node.count_publishers(self.plan_topic) > 0
            if ready_in and ready_out:
                break
            if time.monotonic() - t0 > self.opts.start_timeout_s:
                raise TimeoutError(f"planner node not ready within {self.opts.start_timeout_s:.0f} s (inputs matched: "
                                   f"{ready_in}, plan output: {ready_out}); log {self.node_proc.log_path}:\n"
                                   f"{self.node_proc.tail()}")
            time.sleep(0.1)
        time.sleep(0.5)  # the remaining endpoints (navigation, clock) match too
        log.info("planner node ready after %.1f s", time.monotonic() - t0)

    def _clock(self, t: float) -> None:
        msg = self._msgs["Clock"]()
        msg.clock = convert.to_stamp(t)
        self.pub_clock.publish(msg)
        self.clock_now = t

    def _image(self, rgb: np.ndarray, t: float, camera: str):
        msg = self._msgs["Image"]()
        msg.header.stamp = convert.to_stamp(t)
        msg.header.frame_id = f"camera_{camera}"
        msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
        msg.encoding, msg.is_bigendian, msg.step = "rgb8", 0, int(rgb.shape[1] * 3)
        msg.data = np.ascontiguousarray(rgb, dtype=np.uint8).tobytes()
        return msg

    def _odometry(self, t: float, x: float, y: float, yaw: float, v: float, yaw_rate: float):
        msg = self._msgs["Odometry"]()
        msg.header.stamp = convert.to_stamp(t)
        msg.header.frame_id, msg.child_frame_id = "odom", "base_link"
        msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
        o = msg.pose.pose.orientation
        o.x, o.y, o.z, o.w = yaw_to_quaternion(float(yaw))
        msg.twist.twist.linear.x, msg.twist.twist.angular.z = float(v), float(yaw_rate)
        return msg

    def _wait_plan(self, t: float) -> dict:
        """The node's plan for the frame at (offset) time t; nudges the clock if the node's timer
        fired before the frame arrived."""
        key = _ns(t)
        t0 = time.monotonic()
        nudged = resent = 0
        with self._cv:
            while key not in self._plans:
                waited = time.monotonic() - t0
                if resent < len(RESEND_AT_S) and waited > RESEND_AT_S[resent]:
                    resent += 1
                    self.resends += 1
                    log.warning("no plan from the node for the frame at t=%.2f s of the episode after %.1f s: sending "
                                "the frame again (resend %d)", t - self.offset, waited, resent)
                    for pub, msg in self._frame_msgs:  # the clock is not moved: the next nudge makes the node look
                        pub.publish(msg)
                if not self.node_proc.alive():
                    raise RuntimeError(f"planner node died:\n{self.node_proc.tail()}")
                if waited > self.opts.plan_timeout_s:
                    raise TimeoutError(f"no plan from the node for the frame at t={t - self.offset:.2f} s of the episode "
                                       f"(stamp {t:.6f}) within {self.opts.plan_timeout_s:.0f} s; plans held for stamps "
                                       f"{sorted(k / 1e9 for k in self._plans)}, last received {self._last_received}; "
                                       f"{self._node_state()}")
                due = NUDGE_AT_S[nudged] if nudged < len(NUDGE_AT_S) else NUDGE_AT_S[-1] + 0.5 * (nudged - len(NUDGE_AT_S) + 1)
                if nudged < MAX_NUDGES and waited > due:
                    nudged += 1
                    self.nudges += 1
                    self._clock(t + nudged * NUDGE_S)
                self._cv.wait(0.05)
            return self._plans.pop(key)

    # ------------------------------------------------------------------ the Driver methods
    def bind(self, boxes_of: Callable[[], Sequence[tuple[float, ...]]] | None) -> "NodeBridge":
        """The episode's road users: `boxes_of()` gives (x, y, yaw, length, width) boxes in the ego frame
        at the step being observed (the run's driver factory calls this per episode); None publishes none."""
        self._boxes_of = boxes_of
        return self

    def begin_episode(self, seed: int) -> None:
        self.offset = next_offset(self.offset, self.clock_now)
        with self._cv:
            self._plans.clear()
        self.frame_sent_wall.clear()
        self._last_frame_t = self._last_frame_plan = None

    def observe(self, state: np.ndarray, nav_command: str, images: Callable[[], np.ndarray] | None) -> None:
        t_rel, x, y, yaw, v, w = (float(s) for s in state)
        t = t_rel + self.offset
        frame = []
        if images is not None and self._boxes_of is not None:
            frame.append((self.pub_obstacles, convert.obstacles_to_markers(self._boxes_of(), t, "base_link")))
        frame.append((self.pub_odom, self._odometry(t, x, y, yaw, v, w)))
        frame.append((self.pub_nav, self._msgs["String"](data=nav_command)))
        if images is not None:
            frame += [(self.pub_cam[cam], self._image(img, t, cam)) for cam, img in zip(CAMERAS, images())]
        for pub, msg in frame:
            if self._drop_once is not None and images is not None and pub is self.pub_cam.get(self._drop_once[1]) \
                    and abs(t_rel - self._drop_once[0]) < 1e-6:
                self._drop_once = None  # TEST ONLY: lost on the way the first time
                continue
            pub.publish(msg)
        if images is not None:
            self._frame_msgs = frame
        self._clock(max(t, self.clock_now))
        if images is not None:
            self.frame_sent_wall[_ns(t)] = time.monotonic()
            if t_rel >= FRAME_HISTORY_S - 1e-6:  # the node can build an observation from here on
                self._last_frame_plan = self._wait_plan(t)
                self._last_frame_t = t

    def plan(self, t: float) -> tuple[Plan, float]:
        t_abs = t + self.offset
        if self._last_frame_t is None or self._last_frame_plan is None or _ns(self._last_frame_t) != _ns(t_abs):
            last = None if self._last_frame_t is None else round(self._last_frame_t - self.offset, 3)
            raise ValueError(f"plan asked for t={t:.2f} s, but the last camera frame the node planned was at {last} s")
        doc = self._last_frame_plan
        latency = time.monotonic() - self.frame_sent_wall.pop(_ns(t_abs))
        return plan_from_json(doc, self.offset), latency

    def close(self) -> None:
        try:
            self._spun.close()
        finally:
            code = self.node_proc.stop()
            log.info("planner node exited with %s (clock nudges: %d; frames sent again: %d; plans checked against this "
                     "frame's / older / no boxes: %s)", code, self.nudges, self.resends,
                     "/".join(str(v) for v in self.obstacle_plans.values()))


def next_offset(offset: float, clock_now: float) -> float:
    """The next episode's time zero on the node's clock: EPISODE_GAP_S past both the previous episode's zero and the
    clock, rounded up to a whole second. Whole seconds keep every stamp on the simulator's 50 ms grid: the clock's
    nudges (1.1 ms) leave sub-millisecond residue in clock_now, and an offset with half a millisecond in it put stamps
    on the rounding edge of the millisecond plan keys (`_ns`): the bridge's stamp 2236.5275 keyed to ...527, the
    node's plan for the same frame (its stamp rebuilt from sec + nanosec, one ulp away) to ...528, and the bridge
    waited for ever (runs of 60 episodes stopped after 6 to 34 of them)."""
    return float(math.ceil(max(offset + EPISODE_GAP_S, clock_now + EPISODE_GAP_S)))


def _ns(t: float) -> int:
    return int(round(t * 1e9 / 1e6)) * 1_000_000  # millisecond keys: stamps survive the float round trip


def plan_from_json(doc: dict, offset: float = 0.0) -> Plan:
    """The node's /ddrive/plan JSON back into a Plan (trajectory, rollouts, meta), stamp minus offset."""
    if "trajectory" not in doc:
        raise ValueError(f"plan message without a trajectory (keys {sorted(doc)})")
    traj = np.array([[r["t"], r["x"], r["y"], r["yaw"], r["v"]] for r in doc["trajectory"]], dtype=float)
    wps = doc.get("waypoints", [])
    meta = doc.get("future_meta_behavior")
    return Plan(schema=str(doc.get("schema", "")), waypoints=np.array([[w["x"], w["y"]] for w in wps], float).reshape(-1, 2),
                waypoint_times=np.array([w["t"] for w in wps], float), trajectory=traj,
                rollouts=[np.asarray(r, float) for r in doc.get("rollouts", [])],
                meta=MetaBehavior(**meta) if meta else None, stamp=float(doc["input_stamp"]) - offset,
                critical_objects=dict(doc.get("critical_objects", {})), explanation=doc.get("explanation"))
