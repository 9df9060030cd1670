"""The `ddrive_planner` node: three cameras + odometry + navigation command in, plan out.

    ddrive_planner --ros-args --params-file config/planner.yaml \
        -r ~/input/camera/front/image:=/sensing/camera/front/image_raw ...
    python -m ddrive_ros.ros.node --ros-args -p use_sim_time:=true

Split (as Autoware's camera DNN nodes): this file does ROS I/O, QoS, timing and drops;
`convert.py`/`markers.py` turn messages into numpy and plans into messages; `sync.py` keeps the
bounded buffers and builds observations; `model.py` builds the Planner; `params.py` holds the
parameters, `interface.py` the node-relative topic names, `watchdog.py` planner health and
`diagnostic_status.py` the per-topic statuses.

`PlannerCore` is shared by this plain node (everything in `__init__`, for `ros2 run`) and the
managed one (`lifecycle_node.py`: load in configure, subscribe in activate). Its stages:
declare -> load (model, buffers, publishers, worker) -> start (subscriptions, timers) -> stop -> unload.

Threads: subscriptions and timers run on the executor; a planning timer hands the newest synced
observation to one worker thread that runs inference and publishes. A tick that finds the worker
busy is skipped and counted, so callbacks never wait for inference and nothing queues up; the
worker then takes the newest set itself as soon as it is free, so a planner slower than the timer
plans back to back (rate = min(planning_rate_hz, 1 / plan time)) instead of waiting for a tick. Frames
are decoded and downscaled to the model's input size on arrival, so the buffers hold small images.
"""
from __future__ import annotations

import faulthandler
import functools
import os
import signal
import threading
import time
from collections import Counter, deque
from typing import Any

import numpy as np
import rclpy
import rclpy.logging
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy_impl
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Float64, String
from visualization_msgs.msg import MarkerArray

from ddrive_ros.observation import CAMERAS, Observation
from ddrive_ros.reflection.safety import Limits, Obstacle, SafetyContext
from ddrive_ros.reflection.tracking import BoxTracker
from ddrive_ros.observation_recipe import to_model_size
from ddrive_ros.ros import convert
from ddrive_ros.ros import interface as I
from ddrive_ros.ros.diagnostic_status import FrequencyStatus, Status, TimeStampStatus
from ddrive_ros.ros.markers import plan_markers
from ddrive_ros.ros.node_process import rss_kb
from ddrive_ros.ros.params import PARAMETERS, as_declared_type, check, descriptor
from ddrive_ros.ros.sync import OdomSample, SyncConfig, SyncError, Synchronizer, comfortable_stop
from ddrive_ros.ros.watchdog import PlanWatchdog, Verdict, WindowCount

RCLError = _rclpy_impl.RCLError  # what rcl raises, e.g. a publish on a context already shut down

P_DOUBLE = Parameter.Type.DOUBLE
# parameters whose new value the node applies at run time (the rest are read-only or read at use)
SYNC_PARAMS = ("sync_tolerance_s", "max_input_age_s", "frame_history_s", "odom_wait_s")
KNOB_PARAMS = ("tau", "steps")
PLAN_OPTION_PARAMS = ("reflect", "autoedit_tau", "safety_rounds", "manoeuvre_resamples", "safety_repair",
                      "speed_smoothing", "follow_meta_speed", "start_on_meta")  # read once per plan


def sensor_qos(depth: int) -> QoSProfile:
    return QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST, depth=max(1, depth))


def reliable_qos(depth: int = 10) -> QoSProfile:
    return QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=depth)


def navigation_qos(durability: str) -> QoSProfile:
    """Reliable, depth 1 (only the newest command matters); volatile or transient_local."""
    return QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=1,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if durability == "transient_local"
                      else DurabilityPolicy.VOLATILE)


def _kv(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]


class PlannerCore:
    """The planner node's behaviour; mixed into rclpy's Node or LifecycleNode (which provide the
    ROS API used here)."""

    # ------------------------------------------------------------------ stages
    def _declare(self) -> None:
        # ints for doubles: converted before rclpy's own checks (set at run time) ...
        self.add_pre_set_parameters_callback(lambda params: [as_declared_type(p) for p in params])
        self.add_on_set_parameters_callback(self._on_set_parameters)
        # ... and given on the command line or in a params file: converted before declaration so the
        # declared type is double. rclpy has no public accessor for the overrides; without this dict
        # the int is still accepted (dynamic typing) and `_p` converts it on every read.
        overrides = getattr(self, "_parameter_overrides", None)
        if isinstance(overrides, dict):
            for name, param in list(overrides.items()):
                overrides[name] = as_declared_type(param)
        for name, spec in PARAMETERS.items():
            self.declare_parameter(name, spec.default, descriptor(name, spec))
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._loaded = self._active = False

    def _p(self, name: str) -> Any:
        v = self.get_parameter(name).value
        # ... and on the command line, where a dynamically typed double may arrive as an int
        return float(v) if PARAMETERS[name].type == P_DOUBLE.value else v

    def _load(self) -> None:
        p = self._p
        # navigation first: a command published while the model loads waits in the reader's queue
        # (processed once the executor spins, after the sync exists)
        self.topics: dict[str, str] = {"navigation": self.resolve_topic_name(I.INPUT_NAVIGATION)}
        self._nav_sub = self.create_subscription(String, I.INPUT_NAVIGATION, self._on_nav,
                                                 navigation_qos(p("navigation_durability")))
        if p("debug_load_delay_s") > 0:
            time.sleep(p("debug_load_delay_s"))
        if p("num_threads") > 0:
            import torch

            torch.set_num_threads(p("num_threads"))
        from ddrive_ros.ros.model import load_planner

        t = time.perf_counter()
        self.planner, self.model_info = load_planner(
            p("checkpoint"), p("backend"), p("decoder"), p("tau"), p("steps"), p("rollouts"),
            p("rollout_temperature"), p("device"), p("seed"), p("num_threads"), p("int8"), p("compile"),
            p("draft_previous"), p("tree_rows"), p("tree_depth"), p("logit_bias"))
        self._apply_plan_option_params()
        self.image_size: tuple[int, int] = tuple(self.planner.config.vision.image_size)
        self.get_logger().info(f"planner ready in {time.perf_counter() - t:.1f} s: {self.model_info}")
        if self.model_info.get("random_weights"):
            self.get_logger().warn("the model has RANDOM weights: plans are meaningless (pipeline test only)")
        if p("warmup"):
            self._warmup()

        self.sync = Synchronizer(SyncConfig(
            tolerance_s=p("sync_tolerance_s"), history_s=p("frame_history_s"), max_input_age_s=p("max_input_age_s"),
            camera_buffer=p("camera_buffer_size"), odom_horizon_s=p("odom_history_s"), odom_wait_s=p("odom_wait_s")))
        self._lock = threading.Lock()  # guards self.sync (callbacks vs timer vs diagnostics)
        self.compressed = p("camera_type") == "compressed"
        self.output_frame = p("output_frame")
        self.ego_frame_id = p("ego_frame_id")
        self.odom_frame_id = "odom"  # replaced by the odometry's header.frame_id on arrival
        self.full_hw: dict[str, tuple[int, int]] = {}  # each camera's resolution (for reduced JPEG decodes)
        self.received: Counter[str] = Counter()
        self.sync_failures: Counter[str] = Counter()
        self.ticks = self.skipped_ticks = self.no_new_set = self.plans = self.fallback_plans = 0
        self.plan_errors = self.late_plans_dropped = self.fallback_expired = self.warming_up = self.catch_ups = 0
        # a tick that found no new camera set waits for one: the next complete set is handed over as it
        # arrives instead of at the next tick (a camera rate equal to the planning rate drifts into phase
        # with the timer, and a set arriving just after a tick would be overtaken by the next one)
        self._awaiting_set = False
        self.late_sets = 0
        self.last_no_observation = "none"  # why the last look for a new set found none (diagnostics)
        self.last_latency: dict[str, float] = {}
        self.obstacles: tuple[float, list[tuple[float, ...]]] | None = None  # newest stamp, ego-frame boxes
        # track_obstacles: the sets not yet given to the tracker (the worker feeds them, oldest first, once the
        # odometry at their stamps is in), and the tracker
        self._obstacle_sets: deque[tuple[float, list[tuple[float, ...]]]] = deque(maxlen=50)
        self.tracker = BoxTracker()
        self.unsafe_plans = self.reflect_edits = self.stale_obstacles = 0
        self.pulled_away_plans = self.pull_aways_refused = 0  # start_on_meta: re-timed, and refused by the check
        self._warned_no_obstacles = False  # reflect safety|both with no ~/input/obstacles: warned once
        self.last_reflect: dict[str, Any] = {}
        self.image_decode_ms = 0.0
        self.last_plan: dict[str, Any] | None = None  # trajectory, stamp, v0, pose of the last real plan
        self._last_stamp: float | None = None  # input stamp of the last observation handed to the worker
        self._last_publish_mono: float | None = None
        self._stale: list[str] = ["camera/front"]
        self._verdict = Verdict(True)
        self._fallback_state = ""  # "", "active", "expired"
        self.watchdog = PlanWatchdog(p("plan_timeout_s"))
        window = p("diagnostic_window_s")
        self.windows = {k: WindowCount(window) for k in ("drops", "plan_errors", "sync_failures")}
        self.freq = {f"camera/{c}": FrequencyStatus(1.0, 1e9) for c in CAMERAS}
        self.freq["odometry"] = FrequencyStatus(1.0, 1e9)
        self.stamps = {k: TimeStampStatus(-0.1, p("max_input_age_s")) for k in self.freq}
        rate = p("planning_rate_hz")
        self.out_freq = FrequencyStatus(0.8 * rate, rate)

        out = reliable_qos(10)
        self.pub_path = self.create_publisher(Path, I.OUTPUT_PATH, out)
        self.pub_plan = self.create_publisher(String, I.OUTPUT_PLAN, out)
        self.pub_meta = self.create_publisher(String, I.OUTPUT_META, out)
        self.pub_markers = self.create_publisher(MarkerArray, I.OUTPUT_MARKERS, out)
        self.pub_latency = self.create_publisher(String, I.DEBUG_LATENCY, out)
        self.pub_processing = self.create_publisher(Float64, I.DEBUG_PROCESSING_MS, out)
        self.pub_cyclic = self.create_publisher(Float64, I.DEBUG_CYCLIC_MS, out)
        self.pub_diag = self.create_publisher(DiagnosticArray, I.DIAGNOSTICS, out)
        self.pub_autoware = None
        if convert.autoware_available():
            from autoware_planning_msgs.msg import Trajectory

            self.pub_autoware = self.create_publisher(Trajectory, I.OUTPUT_TRAJECTORY, out)
        self._planner_pubs = [self.pub_path, self.pub_plan, self.pub_meta, self.pub_markers, self.pub_latency,
                            self.pub_processing, self.pub_cyclic, self.pub_diag] + \
                           ([self.pub_autoware] if self.pub_autoware else [])

        self._cv = threading.Condition()
        self._pending: tuple[Observation, float] | None = None
        self._busy = False
        self._missed_tick = False
        self._hand_lock = threading.Lock()  # one hand-over at a time (executor tick or worker catch-up)
        self._running = True
        self._worker = threading.Thread(target=self._work, name="ddrive_planner_worker", daemon=True)
        self._worker.start()
        self._planner_subs: list[Any] = []
        self._planner_timers: dict[str, Any] = {}
        self._loaded = True

    def _start(self) -> None:
        """Subscriptions and timers (after the model is ready: a matched subscriber means a ready node)."""
        p = self._p
        msg_type = CompressedImage if self.compressed else Image
        for cam in CAMERAS:
            name = I.camera_input(cam, self.compressed)
            self.topics[f"camera/{cam}"] = self.resolve_topic_name(name)
            self._planner_subs.append(self.create_subscription(
                msg_type, name, functools.partial(self._on_image, cam), sensor_qos(p("camera_qos_depth"))))
        self.topics["odometry"] = self.resolve_topic_name(I.INPUT_ODOMETRY)
        # best effort matches reliable and best-effort publishers alike; depth covers 50 Hz between ticks
        self._planner_subs.append(self.create_subscription(Odometry, I.INPUT_ODOMETRY, self._on_odom, sensor_qos(50)))
        self.topics["obstacles"] = self.resolve_topic_name(I.INPUT_OBSTACLES)
        self._planner_subs.append(self.create_subscription(MarkerArray, I.INPUT_OBSTACLES, self._on_obstacles,
                                                           sensor_qos(2)))
        self._make_timer("planning", p("planning_rate_hz"), self._on_tick)
        self._make_timer("diagnostics", p("diagnostics_rate_hz"), self._publish_diagnostics)
        self._active = True
        self.get_logger().info(f"subscribed to {self.topics} ({'compressed' if self.compressed else 'raw'} cameras "
                               f"downscaled on arrival to {self.image_size}); planning at {p('planning_rate_hz')} Hz, "
                               f"outputs in {self.output_frame} frame, fallback={p('fallback')}")

    def _stop(self) -> None:
        """Subscriptions and timers go; the model, buffers and publishers stay (a pause)."""
        self._active = False
        for sub in self._planner_subs:
            self.destroy_subscription(sub)
        self._planner_subs.clear()
        for timer in self._planner_timers.values():
            self.destroy_timer(timer)
        self._planner_timers.clear()

    def _unload(self) -> None:
        with self._cv:
            self._running = False
            self._cv.notify_all()
        self._worker.join(timeout=10.0)
        self.destroy_subscription(self._nav_sub)
        for pub in self._planner_pubs:
            self.destroy_publisher(pub)
        self._planner_pubs.clear()
        self.planner = None
        self._loaded = False

    # ------------------------------------------------------------------ parameters
    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        for param in params:
            reason = check(as_declared_type(param))
            if not reason and param.name == "reflect" and param.value in ("autoedit", "both") and \
                    self._p("decoder") == "ar":
                reason = "reflect autoedit/both needs a block decoder; decoder ar runs on one-token blocks"
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def _after_set_parameters(self, params: list[Parameter]) -> None:
        """Apply run-time changes (read-only ones never get here; the rest are read where used)."""
        if not getattr(self, "_loaded", False):
            return
        names = {p.name for p in params}
        if names & set(SYNC_PARAMS):
            with self._lock:
                self.sync.config.tolerance_s = self._p("sync_tolerance_s")
                self.sync.config.max_input_age_s = self._p("max_input_age_s")
                self.sync.config.history_s = self._p("frame_history_s")
                self.sync.config.odom_wait_s = self._p("odom_wait_s")
            for st in self.stamps.values():
                st.max_delay_s = self._p("max_input_age_s")
        if names & set(PLAN_OPTION_PARAMS):
            self._apply_plan_option_params()  # the worker reads the options once per plan
        if names & set(KNOB_PARAMS):
            from ddrive_ros.decoding.strategies import make_strategy
            from ddrive_ros.ros.model import decoder_knobs

            # the worker reads planner.strategy once per plan: the next plan uses the new knobs
            knobs = decoder_knobs(self._p("decoder"), self._p("tau"), self._p("steps"), self._p("tree_rows"),
                                  self._p("tree_depth"))
            self.planner.strategy = make_strategy(self._p("decoder"), **knobs)
            self.model_info["knobs"] = knobs
        if "plan_timeout_s" in names:
            self.watchdog.timeout_s = self._p("plan_timeout_s")
        if "diagnostic_window_s" in names:
            for w in self.windows.values():
                w.window_s = self._p("diagnostic_window_s")
        if "planning_rate_hz" in names:
            rate = self._p("planning_rate_hz")
            self.out_freq.min_hz, self.out_freq.max_hz = 0.8 * rate, rate
            if "planning" in self._planner_timers:
                self._make_timer("planning", rate, self._on_tick)
        if "diagnostics_rate_hz" in names and "diagnostics" in self._planner_timers:
            self._make_timer("diagnostics", self._p("diagnostics_rate_hz"), self._publish_diagnostics)
        self.get_logger().info("parameters changed: " + ", ".join(f"{p.name}={p.value}" for p in params))

    def _make_timer(self, name: str, rate_hz: float, callback) -> None:
        old = self._planner_timers.pop(name, None)
        if old is not None:
            self.destroy_timer(old)
        self._planner_timers[name] = self.create_timer(1.0 / rate_hz, callback)

    # ------------------------------------------------------------------ helpers
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
        self.freq[key].tick()
        t0 = time.perf_counter()
        try:
            if self.compressed and camera not in self.full_hw:
                # decode the first frame in full to learn the resolution; later ones decode reduced
                full = convert.image_to_rgb(msg)
                self.full_hw[camera] = full.shape[:2]
                rgb = to_model_size(full, self.image_size)
            else:
                rgb = convert.image_to_rgb(msg, self.image_size, self.full_hw.get(camera))
        except convert.InvalidMessage as e:
            self._drop(e.reason, self.topics[key], str(e))
            return
        self.image_decode_ms = (time.perf_counter() - t0) * 1e3  # on the executor thread, once per message
        stamp = convert.stamp_to_sec(msg.header.stamp)
        self.stamps[key].tick(stamp, self._now())
        with self._lock:
            self.sync.add_image(camera, stamp, rgb)
        self._plan_waiting_set()

    def _on_odom(self, msg: Odometry) -> None:
        self.received["odometry"] += 1
        self.freq["odometry"].tick()
        try:
            state = convert.odometry_to_state(msg)
        except convert.InvalidMessage as e:
            self._drop(e.reason, self.topics["odometry"], str(e))
            return
        self.odom_frame_id = msg.header.frame_id or self.odom_frame_id
        self.stamps["odometry"].tick(state[0], self._now())
        with self._lock:
            self.sync.add_odometry(OdomSample(*state))
        self._plan_waiting_set()

    def _plan_waiting_set(self) -> None:
        """After a tick that found no new set, the input that completes one (a camera frame, or the odometry
        a frame waited for: Synchronizer's odom_wait_s) has it planned at once instead of at the next tick."""
        if self._awaiting_set and not self._busy and self._active and self._hand_over(self._now(), catch_up=True):
            self._awaiting_set = False
            self.late_sets += 1

    def _on_obstacles(self, msg: MarkerArray) -> None:
        self.received["obstacles"] += 1
        try:
            stamp, boxes = convert.markers_to_obstacles(msg, self.ego_frame_id)
        except convert.InvalidMessage as e:
            self._drop(e.reason, self.topics["obstacles"], str(e))
            return
        with self._lock:
            self.obstacles = (stamp, boxes)
            if self.planner.options.reflect in ("safety", "both"):
                self._obstacle_sets.append((stamp, boxes))

    def _safety_context(self, obs: Observation) -> tuple[SafetyContext | None, dict[str, Any]]:
        """The reflection's context: the ego speed, and the obstacles when they are fresh (no older
        than max_input_age_s against the observation); stale obstacles are left out and counted.
        Also what the plan's stats.reflect reports of them: how many boxes the check held and their
        age against the observation (None when none were used)."""
        if self.planner.options.reflect not in ("safety", "both"):
            return None, {}
        if self._p("track_obstacles"):
            return self._tracked_context(obs)
        with self._lock:
            got = self.obstacles
        boxes = ()
        age_ms = None
        if got is None:
            self._warn_no_obstacles()
        else:
            stamp, raw = got
            if abs(obs.stamp - stamp) <= self._p("max_input_age_s"):
                boxes = tuple(Obstacle(x, y, yaw, length, width) for x, y, yaw, length, width in raw)
                age_ms = round((obs.stamp - stamp) * 1e3, 3)
            else:
                self.stale_obstacles += 1
        return self._check_context(obs, boxes), {"obstacles": len(boxes), "obstacles_age_ms": age_ms,
                                                 "obstacles_tracked": False}

    def _check_context(self, obs: Observation, boxes: tuple[Obstacle, ...] = ()) -> SafetyContext:
        """What a plan is checked against: the ego speed, the boxes, and the check's thresholds with the node's
        safety_horizon_s."""
        return SafetyContext(v0=float(obs.speed), obstacles=boxes,
                             limits=Limits(road_user_horizon_s=self._p("safety_horizon_s")))

    def _warn_no_obstacles(self) -> None:
        if self._warned_no_obstacles:
            return
        self._warned_no_obstacles = True
        self.get_logger().warn(
            f"reflect={self.planner.options.reflect} and nothing received on ~/input/obstacles yet: the safety check "
            "sees only the ego's kinematics and the plan's meta, which in the closed loop gained nothing over "
            "reflect off (docs/reflection.md, 'Safety reflection without perception'); wire the obstacles (tracked and "
            "braked for, they removed every at-fault collision in the simulator: 'Braking from now'), or set reflect "
            "off. The node has no map, so manoeuvre resampling is skipped and repairs only slow along the plan")

    def _tracked_context(self, obs: Observation) -> tuple[SafetyContext, dict[str, Any]]:
        """track_obstacles: the sets received up to the observation go through the tracker (each placed with the
        odometry pose at its stamp; a set outside the odometry history is dropped and counted), and the plan is
        checked against the newest set's boxes moved on to the observation's time and pose at their estimated
        velocities, when that set is fresh (no older than max_input_age_s)."""
        with self._lock:
            due = []
            while self._obstacle_sets and self._obstacle_sets[0][0] <= obs.stamp + 1e-6:
                due.append(self._obstacle_sets.popleft())
            # sets too old to be used or to give a velocity (the tracker forgets after max_gap_s) are passed over
            oldest = obs.stamp - self._p("max_input_age_s") - self.tracker.max_gap_s
            due = [(stamp, boxes) for stamp, boxes in due if stamp >= oldest]
            odom = self.sync.odom
            first, last = (odom.samples[0].t, odom.samples[-1].t) if len(odom) else (None, None)
            poses = [odom.state_at(stamp)[:3] if first is not None and first <= stamp <= last else None
                     for stamp, _ in due]
        for (stamp, boxes), pose in zip(due, poses):
            if pose is None:
                self._drop("obstacles_no_pose", self.topics["obstacles"], f"boxes at {stamp:.3f} s: no odometry at that "
                           f"stamp (odometry held from {first} to {last})")
                continue
            self.tracker.update(stamp, tuple(float(v) for v in pose), boxes)
        none = {"obstacles": 0, "obstacles_age_ms": None, "obstacles_tracked": True}
        if self.tracker.stamp is None:
            self._warn_no_obstacles()
            return self._check_context(obs), none
        if abs(obs.stamp - self.tracker.stamp) > self._p("max_input_age_s"):
            self.stale_obstacles += 1
            return self._check_context(obs), none
        boxes = self.tracker.obstacles_at(obs.stamp, obs.meta["odom_pose"])
        return (self._check_context(obs, boxes),
                {"obstacles": len(boxes), "obstacles_age_ms": round((obs.stamp - self.tracker.stamp) * 1e3, 3),
                 "obstacles_tracked": True})

    def _apply_plan_option_params(self) -> None:
        opt = self.planner.options
        if self._p("reflect") in ("autoedit", "both") and self._p("decoder") == "ar":
            raise ValueError("reflect autoedit/both needs a block decoder; decoder ar runs on one-token blocks")
        opt.reflect, opt.autoedit_tau, opt.safety_rounds = (self._p("reflect"), self._p("autoedit_tau"),
                                                            self._p("safety_rounds"))
        opt.manoeuvre_resamples = self._p("manoeuvre_resamples")
        opt.safety_repair = self._p("safety_repair")
        opt.speed_smoothing = self._p("speed_smoothing")
        opt.follow_meta_speed = self._p("follow_meta_speed")
        opt.start_on_meta = self._p("start_on_meta")
        self.model_info["reflect"] = opt.reflect
        self.model_info["safety_repair"] = opt.safety_repair
        self.model_info["speed_smoothing"] = opt.speed_smoothing
        self.model_info["follow_meta_speed"] = opt.follow_meta_speed
        self.model_info["start_on_meta"] = opt.start_on_meta

    def _on_nav(self, msg: String) -> None:
        self.received["navigation"] += 1
        with self._lock:
            ok = self.sync.set_nav_command(msg.data, self._now())
        if not ok:
            self.get_logger().warn(f"dropped unknown navigation command {msg.data!r}", throttle_duration_sec=2.0)

    def _on_tick(self) -> None:
        now, mono = self._now(), time.monotonic()
        self.ticks += 1
        self._awaiting_set = False  # this tick looks for itself
        with self._lock:
            stale = self.sync.stale_inputs(now)
        self.watchdog.inputs_fresh(mono, not stale)
        was_stale, self._stale = bool(self._stale), stale
        if stale:
            self.get_logger().warn(f"stale or missing inputs (> {self._p('max_input_age_s')} s): {stale}",
                                   throttle_duration_sec=2.0)
            self._fallback(now, "stale inputs: " + ", ".join(stale))
            if not was_stale:
                self._publish_diagnostics()
            return
        verdict, was_healthy = self.watchdog.verdict(mono), self._verdict.healthy
        self._verdict = verdict
        if not verdict.healthy:
            self.get_logger().error(f"planner {verdict.reason}: {verdict.detail}", throttle_duration_sec=2.0)
            self._fallback(now, f"planner {verdict.reason}")
            if was_healthy:
                self._publish_diagnostics()
        elif was_stale:
            self._publish_diagnostics()
        if self._busy:
            self.skipped_ticks += 1
            self._missed_tick = True  # the worker starts the next plan as soon as it is free
            return
        self._hand_over(now, catch_up=False)

    def _hand_over(self, now: float, catch_up: bool) -> bool:
        """Give the newest complete set to the worker (from a tick; from the worker itself when it
        finished after a skipped tick, so a slow plan runs back to back: min(rate, 1 / plan time); or
        from a camera callback after a tick that found no new set). True when a set was handed over."""
        with self._hand_lock:
            if self._busy:
                return False
            with self._lock:
                if catch_up and self.sync.stale_inputs(now):
                    return False  # the next tick reports it
                try:
                    obs = self.sync.build(now)
                except SyncError as e:
                    if e.reason == "no_history" and self.last_plan is None:
                        self.warming_up += 1  # the first frame_history_s of frames: not a failure
                        return False
                    self.sync_failures[e.reason] += 1
                    self.last_no_observation = f"{e} (node clock {now:.3f})"
                    self.watchdog.failed(f"no observation: {e.reason}")
                    self.get_logger().warn(f"no observation: {e}", throttle_duration_sec=2.0)
                    return False
            if obs.stamp == self._last_stamp:
                self.last_no_observation = f"newest complete set {obs.stamp:.3f} planned already (node clock {now:.3f})"
                if not catch_up:
                    self.no_new_set += 1  # the newest complete set was planned already: wait for the next
                    self._awaiting_set = True
                return False
            self._last_stamp = obs.stamp
            with self._cv:
                self._busy = True
                self._pending = (obs, time.perf_counter())
                self._cv.notify()
            return True

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
            started = time.monotonic()
            self.watchdog.started(started)
            try:
                self._debug_delay(started)
                published = self._plan_and_publish(obs, handed, started)
                self.watchdog.finished(time.monotonic(), published)
            except Exception as e:  # noqa: BLE001 - the node must stay up; counted, reported, watched
                self.plan_errors += 1
                self.watchdog.finished(time.monotonic(), False, f"{type(e).__name__}: {e}")
                self.get_logger().error(f"planning failed: {type(e).__name__}: {e}", throttle_duration_sec=2.0)
            finally:
                self._busy = False
            if self._missed_tick and self._active:
                self._missed_tick = False
                self.catch_ups += self._hand_over(self._now(), catch_up=True)

    def _debug_delay(self, started: float) -> None:
        """TEST ONLY (debug_plan_delay_s): a planner that hangs; re-read so setting 0 ends the hang."""
        while self._running and time.monotonic() - started < self._p("debug_plan_delay_s"):
            time.sleep(0.02)

    def _plan_and_publish(self, obs: Observation, handed: float, started: float) -> bool:
        t0 = time.perf_counter()
        context, seen = self._safety_context(obs)
        plan = self.planner.plan(obs, context)
        t1 = time.perf_counter()
        if time.monotonic() - started > self.watchdog.timeout_s:
            # the watchdog already sent the fallback for this plan: its input is too old to publish
            self.late_plans_dropped += 1
            self.get_logger().warn(f"dropped a plan that took {time.monotonic() - started:.2f} s "
                                   f"(> plan_timeout_s {self.watchdog.timeout_s:g})", throttle_duration_sec=2.0)
            return False
        latency = {k: round(v, 3) for k, v in (plan.stats.stage_ms if plan.stats else {}).items()}
        latency.update(queue=round((t0 - handed) * 1e3, 3), plan=round((t1 - t0) * 1e3, 3))
        traj = plan.trajectory
        doc = plan.to_json_dict()
        reflect = plan.stats.reflect if plan.stats else {}
        if seen and "stats" in doc:
            doc["stats"].setdefault("reflect", {}).update(seen)
        if reflect:
            self.last_reflect = reflect
            self.reflect_edits += int(reflect.get("edited_tokens", 0))
            self.unsafe_plans += int(reflect.get("safe") is False)
        self.pulled_away_plans += int(plan.pulled_away)
        self.pull_aways_refused += int(plan.pull_away_refused)
        meta = doc.get("future_meta_behavior")
        latency["image_decode"] = round(self.image_decode_ms, 3)
        pose = obs.meta.get("odom_pose")
        t2 = time.perf_counter()
        self._publish(traj, plan.waypoints, plan.rollouts, meta, obs.stamp, doc, latency, False, pose)
        latency["publish"] = round((time.perf_counter() - t2) * 1e3, 3)
        latency["total"] = round((time.perf_counter() - handed) * 1e3, 3)
        self.last_latency = latency
        mono = time.monotonic()
        self.pub_processing.publish(convert.float64(latency["total"]))
        if self._last_publish_mono is not None:
            self.pub_cyclic.publish(convert.float64((mono - self._last_publish_mono) * 1e3))
        self._last_publish_mono = mono
        self.pub_latency.publish(convert.json_string({"stamp": obs.stamp, "stage_ms": latency,
                                                      "age_ms": round((self._now() - obs.stamp) * 1e3, 3)}))
        self.last_plan = {"trajectory": traj, "stamp": obs.stamp, "v0": obs.speed, "meta": meta, "pose": pose}
        self.plans += 1
        self.out_freq.tick()
        self._fallback_state = ""
        return True

    def _publish(self, traj: np.ndarray, waypoints, rollouts, meta, stamp: float, doc: dict, latency: dict,
                 fallback: bool, pose: tuple[float, float, float] | None) -> None:
        """Path, markers and the Autoware trajectory in the output frame; the plan JSON keeps the ego
        frame at the input stamp and carries the odometry pose used for the transform."""
        if not self._active:
            return  # deactivated while this plan ran
        if self.output_frame == "odom":
            if pose is None:
                raise ValueError("output_frame odom needs the odometry pose at the input stamp (observation meta "
                                 "'odom_pose' is missing)")
            frame_id = self.odom_frame_id
            out_traj = convert.to_frame(traj, pose)
            waypoints = convert.points_to_frame(waypoints, pose)
            rollouts = [convert.points_to_frame(r, pose) for r in rollouts] if rollouts else rollouts
        else:
            frame_id, out_traj = self.ego_frame_id, traj
        doc = dict(doc)
        doc.update(input_stamp=stamp, frame_id=self.ego_frame_id, output_frame_id=frame_id, odom_pose=pose,
                   fallback=fallback, latency_ms=dict(latency), model=self.model_info)
        self.pub_path.publish(convert.trajectory_to_path(out_traj, stamp, frame_id))
        self.pub_plan.publish(convert.json_string(doc))
        self.pub_meta.publish(convert.json_string({"stamp": stamp, "fallback": fallback, **(meta or {})}))
        draft = doc.get("draft_waypoints")
        if draft is not None and self.output_frame == "odom":
            draft = convert.points_to_frame(np.asarray(draft), pose)
        self.pub_markers.publish(plan_markers(out_traj, waypoints, rollouts, meta, stamp, frame_id, fallback,
                                              lifetime_s=max(1.0, 3.0 / self._p("planning_rate_hz")), draft=draft))
        if self.pub_autoware is not None:
            self.pub_autoware.publish(convert.trajectory_to_autoware(out_traj, stamp, frame_id))

    def _fallback(self, now: float, why: str) -> None:
        """A comfortable stop along the last plan, until it expires (fallback_timeout_s after the last
        plan's stamp): after that nothing is sent, so no consumer mistakes an old stop for news."""
        last = self.last_plan
        if self._p("fallback") != "stop" or last is None:
            return
        if now - last["stamp"] > self._p("fallback_timeout_s"):
            if self._fallback_state != "expired":
                self.fallback_expired += 1
                self.get_logger().error(f"fallback stop expired ({now - last['stamp']:.1f} s after the last plan's "
                                        f"stamp > fallback_timeout_s): publishing nothing until a new plan")
            self._fallback_state = "expired"
            return
        traj = comfortable_stop(last["trajectory"], self._p("fallback_decel"), v0=last["v0"])
        meta = {"longitudinal": "STOP", "lateral": "STRAIGHT", "target_speed": 0.0, "turn_signal": "OFF"}
        doc = {"schema": "fallback_stop", "stamp": last["stamp"], "valid": True, "future_meta_behavior": meta,
               "trajectory": [dict(zip(("t", "x", "y", "yaw", "v"), map(float, r))) for r in traj],
               "stale_inputs": list(self._stale), "reason": why}
        self._publish(traj, None, None, meta, last["stamp"], doc, {}, True, last["pose"])
        self._fallback_state = "active"
        self.fallback_plans += 1

    # ------------------------------------------------------------------ diagnostics
    def _status(self, name: str, st: Status) -> DiagnosticStatus:
        return DiagnosticStatus(level=bytes([st.level]), name=f"ddrive_planner: {name}", message=st.message,
                                hardware_id="ddrive_planner", values=_kv(st.values))

    def _publish_diagnostics(self) -> None:
        now, mono = self._now(), time.monotonic()
        with self._lock:
            ages = self.sync.input_ages(now).ages
            drops = self.sync.drops.snapshot()
            nav = self.sync.nav_command
            buffers = {f"camera/{k}": len(b) for k, b in self.sync.cameras.items()}
            buffers["odometry"] = len(self.sync.odom)
        max_age = self._p("max_input_age_s")
        stale = [k for k, v in ages.items() if v is None or v > max_age]
        recent_drops = self.windows["drops"].update(mono, sum(drops.values()))
        recent_errors = self.windows["plan_errors"].update(mono, self.plan_errors)
        recent_sync = self.windows["sync_failures"].update(mono, sum(self.sync_failures.values()))
        window = self._p("diagnostic_window_s")

        values: dict[str, Any] = {}
        for k, v in ages.items():
            values[f"age_s/{k}"] = "never" if v is None else f"{v:.3f}"
            values[f"received/{k}"] = self.received[k]
        values.update({f"buffered/{k}": v for k, v in buffers.items()})
        values.update(navigation_command=nav, dropped_total=sum(drops.values()), dropped_in_window=recent_drops)
        values.update({f"dropped/{k}": v for k, v in sorted(drops.items())})
        if stale:
            inputs = Status(2, "stale or missing: " + ", ".join(stale), values)
        elif recent_drops:
            inputs = Status(1, f"{recent_drops} messages dropped in the last {window:g} s", values)
        else:
            inputs = Status(0, "inputs fresh", values)

        values = {"reflect": self._p("reflect"), "safety_repair": self._p("safety_repair"),
                  "track_obstacles": self._p("track_obstacles"), "safety_horizon_s": self._p("safety_horizon_s"),
                  "speed_smoothing": self._p("speed_smoothing"),
                  "follow_meta_speed": self._p("follow_meta_speed"), "start_on_meta": self._p("start_on_meta"),
                  "reflect_edited_tokens": self.reflect_edits,
                  "unsafe_plans": self.unsafe_plans, "stale_obstacles": self.stale_obstacles,
                  "pulled_away_plans": self.pulled_away_plans, "pull_aways_refused": self.pull_aways_refused,
                  "last_violations": ",".join(sorted({k for row in self.last_reflect.get("violations_after", [])
                                                      for k in row})) or "none",
                  "plans": self.plans, "ticks": self.ticks, "skipped_ticks": self.skipped_ticks,
                  "no_new_set": self.no_new_set, "last_no_observation": self.last_no_observation,
                  "warming_up": self.warming_up, "catch_ups": self.catch_ups, "late_sets": self.late_sets,
                  "fallback_plans": self.fallback_plans,
                  "fallback_active": self._fallback_state == "active", "fallback_expired": self.fallback_expired,
                  "plan_errors": self.plan_errors, "plan_errors_in_window": recent_errors,
                  "sync_failed_in_window": recent_sync, "late_plans_dropped": self.late_plans_dropped,
                  "busy": self._busy, "rss_kb": rss_kb(os.getpid()) or -1,
                  "plan_age_s": "never" if self.watchdog.last_plan is None else f"{mono - self.watchdog.last_plan:.3f}",
                  "worker_busy_s": "idle" if self.watchdog.busy_since is None
                  else f"{mono - self.watchdog.busy_since:.3f}"}
        values.update({f"sync_failed/{k}": v for k, v in sorted(self.sync_failures.items())})
        values.update({f"latency_ms/{k}": f"{v:.1f}" for k, v in self.last_latency.items()})
        fb = {"active": "fallback stop", "expired": "fallback expired"}.get(self._fallback_state, "no fallback")
        verdict = self._verdict  # the planning tick's own verdict, so ERROR and the fallback go together
        if stale:
            planning = Status(2, f"{fb}: stale inputs", values)
        elif not verdict.healthy:
            planning = Status(2, f"{fb}: planner {verdict.reason}: {verdict.detail}", values)
        elif recent_errors or recent_sync:
            planning = Status(1, f"{recent_errors} planning errors, {recent_sync} sync failures in the last "
                                 f"{window:g} s", values)
        else:
            planning = Status(0, "planning", values)

        statuses = [self._status("inputs", inputs), self._status("planning", planning)]
        for k in self.freq:
            statuses.append(self._status(f"{k} frequency", self.freq[k].status(mono)))
            statuses.append(self._status(f"{k} timestamp", self.stamps[k].status()))
        statuses.append(self._status("output frequency", self.out_freq.status(mono)))
        arr = DiagnosticArray()
        arr.header.stamp = convert.to_stamp(now)
        arr.status = statuses
        self.pub_diag.publish(arr)


class PlannerNode(PlannerCore, Node):
    """The plain node (`ros2 run ddrive_ros ddrive_planner`): loads, subscribes and plans at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(I.NODE_NAME, **kwargs)
        self._declare()
        self._load()
        self._start()

    def destroy_node(self) -> None:
        if self._loaded:
            self._stop()
            self._unload()
        super().destroy_node()


def main(args: list[str] | None = None, node_class: type = PlannerNode) -> None:
    """rclpy.init, build the node, spin until Ctrl-C or shutdown, clean up."""
    # NodeProcess.stop sends SIGUSR1 to a node that has not exited 15 s after SIGINT, before it kills it: every
    # thread's stack then goes to stderr (the node's log), so where the shutdown hung can be read afterwards
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    rclpy.init(args=args)
    node = None
    try:
        node = node_class()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RCLError as e:
        if rclpy.ok():  # the context still runs: a real failure
            raise
        # Ctrl-C shuts the context down from the signal handler; a timer callback the executor had already taken
        # then fails to publish. That is the shutdown finishing, not a fault: log it and exit 0.
        rclpy.logging.get_logger(I.NODE_NAME).info(f"shutdown: a callback in flight lost its context ({e})")
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
