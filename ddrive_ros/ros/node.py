"""The `ddrive_planner` node: three cameras + odometry + navigation command in, plan out.

    ddrive_planner --ros-args --params-file config/planner.yaml -p checkpoint:=random:tiny:fast_ddrive
    python -m ddrive_ros.ros.node --ros-args -p use_sim_time:=true

Split (as Autoware's camera DNN nodes): this file does ROS I/O, QoS, timing and drops;
`convert.py`/`markers.py` turn messages into numpy and plans into messages; `sync.py` keeps the
bounded buffers and builds observations; `model.py` builds the Planner.

Threads: subscriptions and timers run on the executor; a planning timer hands the newest synced
observation to one worker thread that runs inference and publishes. A tick that finds the worker
busy is skipped and counted, so callbacks never wait for inference and nothing queues up.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from ddrive_ros.observation import CAMERAS, Observation
from ddrive_ros.planner_options import PlannerOptions
from ddrive_ros.ros import convert
from ddrive_ros.ros.markers import plan_markers
from ddrive_ros.ros.model import DEFAULT_CHECKPOINT
from ddrive_ros.ros.node_process import rss_kb
from ddrive_ros.ros.sync import OdomSample, SyncConfig, SyncError, Synchronizer, comfortable_stop

P = ParameterType
_OPT = PlannerOptions()
# name -> (default, type, description). Every parameter set in config/planner.yaml or the launch files is here.
PARAMETERS: dict[str, tuple[Any, int, str]] = {
    "checkpoint": (DEFAULT_CHECKPOINT, P.PARAMETER_STRING,
                   "checkpoint folder, shipped model name under models/, or random:<config>:<schema>"),
    "backend": (_OPT.backend, P.PARAMETER_STRING, "runtime backend: torch | cuda_graph | onnx | tensorrt"),
    "decoder": (_OPT.decoder, P.PARAMETER_STRING, "decoder: ar | diffusion | speculative | s2d2"),
    "tau": (0.9, P.PARAMETER_DOUBLE, "confidence threshold of the diffusion / s2d2 decoders"),
    "steps": (0, P.PARAMETER_INTEGER, "fixed denoising forwards per block (diffusion); 0 = by threshold"),
    "rollouts": (_OPT.rollouts, P.PARAMETER_INTEGER, "trajectory rollouts sharing the prefix cache (averaged)"),
    "rollout_temperature": (_OPT.rollout_temperature, P.PARAMETER_DOUBLE, "sampling temperature of rollouts 2..N"),
    "seed": (_OPT.seed, P.PARAMETER_INTEGER, "sampling seed (and random-weight seed)"),
    "device": (_OPT.device, P.PARAMETER_STRING, "torch device, e.g. cpu or cuda:0"),
    "num_threads": (0, P.PARAMETER_INTEGER, "torch CPU threads; 0 = torch default"),
    "warmup": (True, P.PARAMETER_BOOL, "run one plan on a blank observation before subscribing"),
    "camera_type": ("raw", P.PARAMETER_STRING, "raw (sensor_msgs/Image) or compressed (CompressedImage)"),
    "camera_topics.left_front": ("/camera/left_front/image_raw", P.PARAMETER_STRING, "left-front camera topic"),
    "camera_topics.front": ("/camera/front/image_raw", P.PARAMETER_STRING, "front camera topic (sync anchor)"),
    "camera_topics.right_front": ("/camera/right_front/image_raw", P.PARAMETER_STRING, "right-front camera topic"),
    "camera_qos_depth": (2, P.PARAMETER_INTEGER, "queue depth of the best-effort camera subscriptions"),
    "odom_topic": ("/odom", P.PARAMETER_STRING, "nav_msgs/Odometry (odom -> base_link, twist in body frame)"),
    "navigation_topic": ("/navigation/command", P.PARAMETER_STRING, "std_msgs/String navigation command"),
    "output_topics.path": ("/ddrive/path", P.PARAMETER_STRING, "nav_msgs/Path of the planned trajectory"),
    "output_topics.plan": ("/ddrive/plan", P.PARAMETER_STRING, "std_msgs/String JSON of the whole plan"),
    "output_topics.meta": ("/ddrive/meta_behavior", P.PARAMETER_STRING, "std_msgs/String JSON meta behaviour"),
    "output_topics.markers": ("/ddrive/markers", P.PARAMETER_STRING, "visualization_msgs/MarkerArray for RViz"),
    "output_topics.trajectory": ("/ddrive/trajectory", P.PARAMETER_STRING,
                                 "autoware_planning_msgs/Trajectory (only when that package is importable)"),
    "output_frame_id": ("base_link", P.PARAMETER_STRING, "frame of the outputs: ego frame at the input stamp"),
    "planning_rate_hz": (5.0, P.PARAMETER_DOUBLE, "planning timer rate"),
    "diagnostics_rate_hz": (2.0, P.PARAMETER_DOUBLE, "diagnostics publishing rate"),
    "sync_tolerance_s": (0.05, P.PARAMETER_DOUBLE, "max stamp difference between a side camera and the front"),
    "max_input_age_s": (0.5, P.PARAMETER_DOUBLE, "inputs older than this (node clock) are stale: no plan"),
    "frame_history_s": (0.5, P.PARAMETER_DOUBLE, "age of the second (history) frame"),
    "camera_buffer_size": (30, P.PARAMETER_INTEGER, "frames kept per camera (must cover frame_history_s)"),
    "odom_history_s": (3.0, P.PARAMETER_DOUBLE, "odometry kept (must cover the 2 s of past positions)"),
    "fallback": ("stop", P.PARAMETER_STRING, "on stale inputs: stop (comfortable stop along the last plan) | none"),
    "fallback_decel": (2.0, P.PARAMETER_DOUBLE, "deceleration of the fallback stop, m/s^2"),
}


def _sensor_qos(depth: int) -> QoSProfile:
    return QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST, depth=max(1, depth))


def _reliable_qos(depth: int = 10) -> QoSProfile:
    return QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=depth)


class PlannerNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("ddrive_planner", **kwargs)
        for name, (default, ptype, text) in PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=text, type=ptype))
        p = self._p
        if p("fallback") not in ("stop", "none"):
            raise ValueError(f"fallback must be stop or none, got {p('fallback')!r}")
        if p("camera_type") not in ("raw", "compressed"):
            raise ValueError(f"camera_type must be raw or compressed, got {p('camera_type')!r}")
        if p("num_threads") > 0:
            import torch

            torch.set_num_threads(p("num_threads"))

        # ---- model
        from ddrive_ros.ros.model import load_planner

        t = time.perf_counter()
        self.planner, self.model_info = load_planner(
            p("checkpoint"), p("backend"), p("decoder"), p("tau"), p("steps"), p("rollouts"),
            p("rollout_temperature"), p("device"), p("seed"))
        self.get_logger().info(f"planner ready in {time.perf_counter() - t:.1f} s: {self.model_info}")
        if self.model_info.get("random_weights"):
            self.get_logger().warn("the model has RANDOM weights: plans are meaningless (pipeline test only)")
        if p("warmup"):
            self._warmup()

        # ---- state
        self.sync = Synchronizer(SyncConfig(
            tolerance_s=p("sync_tolerance_s"), history_s=p("frame_history_s"), max_input_age_s=p("max_input_age_s"),
            camera_buffer=p("camera_buffer_size"), odom_horizon_s=p("odom_history_s")))
        self._lock = threading.Lock()  # guards self.sync (callbacks vs timer under any executor)
        self.frame_id = p("output_frame_id")
        self.fallback = p("fallback")
        self.received: Counter[str] = Counter()
        self.sync_failures: Counter[str] = Counter()
        self.ticks = self.skipped_ticks = self.plans = self.fallback_plans = self.plan_errors = 0
        self.last_latency: dict[str, float] = {}
        self.image_decode_ms = 0.0
        self.last_plan: dict[str, Any] | None = None  # trajectory, stamp, v0 of the last real plan
        self._last_anchor: float | None = None
        self._stale: list[str] = ["camera/front"]
        self._fallback_active = False
        self._last_level: int | None = None

        # ---- publishers
        out = _reliable_qos(10)
        self.pub_path = self.create_publisher(Path, p("output_topics.path"), out)
        self.pub_plan = self.create_publisher(String, p("output_topics.plan"), out)
        self.pub_meta = self.create_publisher(String, p("output_topics.meta"), out)
        self.pub_markers = self.create_publisher(MarkerArray, p("output_topics.markers"), out)
        self.pub_latency = self.create_publisher(String, "~/latency", out)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", out)
        self.pub_autoware = None
        if convert.trajectory_to_autoware(np.zeros((1, 5)), 0.0, "") is not None:
            from autoware_planning_msgs.msg import Trajectory

            self.pub_autoware = self.create_publisher(Trajectory, p("output_topics.trajectory"), out)

        # ---- worker
        self._cv = threading.Condition()
        self._pending: tuple[Observation, float] | None = None
        self._busy = False
        self._running = True
        self._worker = threading.Thread(target=self._work, name="ddrive_planner_worker", daemon=True)
        self._worker.start()

        # ---- subscriptions (after the model is ready: a matched subscriber means a ready node)
        compressed = p("camera_type") == "compressed"
        msg_type = CompressedImage if compressed else Image
        self.topics: dict[str, str] = {}
        for cam in CAMERAS:
            topic = p(f"camera_topics.{cam}")
            if compressed and not topic.endswith("compressed"):
                topic = topic.rstrip("/") + "/compressed"
            self.topics[f"camera/{cam}"] = topic
            self.create_subscription(msg_type, topic, functools.partial(self._on_image, cam),
                                     _sensor_qos(p("camera_qos_depth")))
        self.topics["odometry"] = p("odom_topic")
        self.create_subscription(Odometry, p("odom_topic"), self._on_odom, _reliable_qos(50))
        self.create_subscription(String, p("navigation_topic"), self._on_nav, _reliable_qos(10))

        # ---- timers
        self.create_timer(1.0 / max(p("planning_rate_hz"), 1e-3), self._on_tick)
        self.create_timer(1.0 / max(p("diagnostics_rate_hz"), 1e-3), self._publish_diagnostics)
        self.get_logger().info(f"subscribed to {self.topics} ({'compressed' if compressed else 'raw'} cameras); "
                               f"planning at {p('planning_rate_hz')} Hz, fallback={self.fallback}")

    # ------------------------------------------------------------------ helpers
    def _p(self, name: str) -> Any:
        return self.get_parameter(name).value

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _warmup(self) -> None:
        h, w = self.planner.config.vision.image_size
        obs = Observation(images=np.zeros((2, len(CAMERAS), h, w, 3), np.uint8), speed=0.0, accel=0.0, yaw_rate=0.0,
                          past_xy=np.zeros((4, 2)))
        t = time.perf_counter()
        self.planner.plan(obs)
        self.get_logger().info(f"warm-up plan took {(time.perf_counter() - t) * 1e3:.0f} ms")

    def _drop(self, reason: str, topic: str, detail: str) -> None:
        self.sync.drops.add(reason)
        self.get_logger().warn(f"dropped a message on {topic} ({reason}): {detail}", throttle_duration_sec=2.0)

    # ------------------------------------------------------------------ callbacks (never block)
    def _on_image(self, camera: str, msg: Image | CompressedImage) -> None:
        key = f"camera/{camera}"
        self.received[key] += 1
        t0 = time.perf_counter()
        try:
            rgb = convert.image_to_rgb(msg)
        except convert.InvalidMessage as e:
            self._drop(e.reason, self.topics[key], str(e))
            return
        self.image_decode_ms = (time.perf_counter() - t0) * 1e3  # on the callback thread, once per message
        stamp = convert.stamp_to_sec(msg.header.stamp)
        with self._lock:
            self.sync.add_image(camera, stamp, rgb)

    def _on_odom(self, msg: Odometry) -> None:
        self.received["odometry"] += 1
        try:
            state = convert.odometry_to_state(msg)
        except convert.InvalidMessage as e:
            self._drop(e.reason, self.topics["odometry"], str(e))
            return
        with self._lock:
            self.sync.add_odometry(OdomSample(*state))

    def _on_nav(self, msg: String) -> None:
        self.received["navigation"] += 1
        with self._lock:
            ok = self.sync.set_nav_command(msg.data, self._now())
        if not ok:
            self.get_logger().warn(f"dropped unknown navigation command {msg.data!r}", throttle_duration_sec=2.0)

    def _on_tick(self) -> None:
        now = self._now()
        self.ticks += 1
        with self._lock:
            stale = self.sync.stale_inputs(now)
        was_stale, self._stale = bool(self._stale), stale
        if stale:
            self.get_logger().warn(f"stale or missing inputs (> {self._p('max_input_age_s')} s): {stale}",
                                   throttle_duration_sec=2.0)
            if self.fallback == "stop" and self.last_plan is not None:
                self._publish_fallback()
            if not was_stale:
                self._publish_diagnostics()
            return
        if was_stale:
            self._fallback_active = False
            self._publish_diagnostics()
        if self._busy:
            self.skipped_ticks += 1
            return
        with self._lock:
            anchor = self.sync.anchor_stamp
            if anchor is None or anchor == self._last_anchor:
                return
            try:
                obs = self.sync.build(now)
            except SyncError as e:
                self.sync_failures[e.reason] += 1
                self.get_logger().warn(f"no observation: {e}", throttle_duration_sec=2.0)
                return
        self._last_anchor = anchor
        with self._cv:
            self._busy = True
            self._pending = (obs, time.perf_counter())
            self._cv.notify()

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        while True:
            with self._cv:
                while self._pending is None and self._running:
                    self._cv.wait(0.5)
                if not self._running:
                    return
                obs, handed = self._pending
                self._pending = None
            try:
                self._plan_and_publish(obs, handed)
            except Exception as e:  # noqa: BLE001 - the node must stay up; count and report
                self.plan_errors += 1
                self.get_logger().error(f"planning failed: {type(e).__name__}: {e}", throttle_duration_sec=2.0)
            finally:
                self._busy = False

    def _plan_and_publish(self, obs: Observation, handed: float) -> None:
        t0 = time.perf_counter()
        plan = self.planner.plan(obs)
        t1 = time.perf_counter()
        latency = {k: round(v, 3) for k, v in (plan.stats.stage_ms if plan.stats else {}).items()}
        latency.update(queue=round((t0 - handed) * 1e3, 3), plan=round((t1 - t0) * 1e3, 3))
        traj = plan.trajectory
        doc = plan.to_json_dict()
        meta = doc.get("future_meta_behavior")
        latency["image_decode"] = round(self.image_decode_ms, 3)
        t2 = time.perf_counter()
        self._publish(traj, plan.waypoints, plan.rollouts, meta, obs.stamp, doc, latency, fallback=False)
        latency["publish"] = round((time.perf_counter() - t2) * 1e3, 3)
        latency["total"] = round((time.perf_counter() - handed) * 1e3, 3)
        self.last_latency = latency
        self.pub_latency.publish(convert.json_string({"stamp": obs.stamp, "stage_ms": latency,
                                                      "age_ms": round((self._now() - obs.stamp) * 1e3, 3)}))
        self.last_plan = {"trajectory": traj, "stamp": obs.stamp, "v0": obs.speed, "meta": meta}
        self.plans += 1

    def _publish(self, traj: np.ndarray, waypoints, rollouts, meta, stamp: float, doc: dict, latency: dict,
                 fallback: bool) -> None:
        doc = dict(doc)
        doc.update(input_stamp=stamp, frame_id=self.frame_id, fallback=fallback, latency_ms=dict(latency),
                   model=self.model_info)
        self.pub_path.publish(convert.trajectory_to_path(traj, stamp, self.frame_id))
        self.pub_plan.publish(convert.json_string(doc))
        self.pub_meta.publish(convert.json_string({"stamp": stamp, "fallback": fallback, **(meta or {})}))
        self.pub_markers.publish(plan_markers(traj, waypoints, rollouts, meta, stamp, self.frame_id, fallback))
        if self.pub_autoware is not None:
            self.pub_autoware.publish(convert.trajectory_to_autoware(traj, stamp, self.frame_id))

    def _publish_fallback(self) -> None:
        last = self.last_plan
        traj = comfortable_stop(last["trajectory"], self._p("fallback_decel"), v0=last["v0"])
        meta = {"longitudinal": "STOP", "lateral": "STRAIGHT", "target_speed": 0.0, "turn_signal": "OFF"}
        doc = {"schema": "fallback_stop", "stamp": last["stamp"], "valid": True, "future_meta_behavior": meta,
               "trajectory": [dict(zip(("t", "x", "y", "yaw", "v"), map(float, r))) for r in traj],
               "stale_inputs": list(self._stale)}
        self._publish(traj, None, None, meta, last["stamp"], doc, {}, fallback=True)
        self._fallback_active = True
        self.fallback_plans += 1

    # ------------------------------------------------------------------ diagnostics
    def _publish_diagnostics(self) -> None:
        now = self._now()
        with self._lock:
            ages = self.sync.input_ages(now).ages
            drops = self.sync.drops.snapshot()
            nav = self.sync.nav_command
            buffers = {f"camera/{k}": len(b) for k, b in self.sync.cameras.items()}
            buffers["odometry"] = len(self.sync.odom)
        max_age = self._p("max_input_age_s")
        stale = [k for k, v in ages.items() if v is None or v > max_age]
        inputs = DiagnosticStatus(name="ddrive_planner: inputs", hardware_id="ddrive_planner")
        kv = inputs.values
        for k, v in ages.items():
            kv.append(KeyValue(key=f"age_s/{k}", value="never" if v is None else f"{v:.3f}"))
            kv.append(KeyValue(key=f"received/{k}", value=str(self.received[k])))
        for k, v in buffers.items():
            kv.append(KeyValue(key=f"buffered/{k}", value=str(v)))
        kv.append(KeyValue(key="navigation_command", value=nav))
        kv.append(KeyValue(key="dropped_total", value=str(sum(drops.values()))))
        for k, v in sorted(drops.items()):
            kv.append(KeyValue(key=f"dropped/{k}", value=str(v)))
        for k, v in sorted(self.sync_failures.items()):
            kv.append(KeyValue(key=f"sync_failed/{k}", value=str(v)))
        if stale:
            inputs.level, inputs.message = DiagnosticStatus.ERROR, "stale or missing: " + ", ".join(stale)
        elif drops:
            inputs.level, inputs.message = DiagnosticStatus.WARN, f"{sum(drops.values())} messages dropped"
        else:
            inputs.level, inputs.message = DiagnosticStatus.OK, "inputs fresh"

        planning = DiagnosticStatus(name="ddrive_planner: planning", hardware_id="ddrive_planner")
        kv = planning.values
        for k, v in (("plans", self.plans), ("ticks", self.ticks), ("skipped_ticks", self.skipped_ticks),
                     ("fallback_plans", self.fallback_plans), ("fallback_active", self._fallback_active),
                     ("plan_errors", self.plan_errors), ("busy", self._busy), ("rss_kb", rss_kb(os.getpid()) or -1)):
            kv.append(KeyValue(key=k, value=str(v)))
        for k, v in self.last_latency.items():
            kv.append(KeyValue(key=f"latency_ms/{k}", value=f"{v:.1f}"))
        if stale:
            planning.level = DiagnosticStatus.ERROR
            planning.message = "fallback stop" if self._fallback_active else "no plan: stale inputs"
        elif self.plan_errors:
            planning.level, planning.message = DiagnosticStatus.WARN, f"{self.plan_errors} planning errors"
        else:
            planning.level, planning.message = DiagnosticStatus.OK, "planning"
        arr = DiagnosticArray()
        arr.header.stamp = convert.to_stamp(now)
        arr.status = [inputs, planning]
        self.pub_diag.publish(arr)

    def destroy_node(self) -> None:
        with self._cv:
            self._running = False
            self._cv.notify_all()
        self._worker.join(timeout=10.0)
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = PlannerNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
