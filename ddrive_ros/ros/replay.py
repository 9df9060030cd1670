"""Replay a rosbag2 into a live planner node without the ROS 2 CLI, record its outputs, score them.

    report = replay(ReplayOptions(bag="demo_out/input_bag", start_node=True, out="demo_out"))

1. reads the bag with rosbags and publishes every input topic (CDR bytes as recorded, so nothing is
   re-encoded) at its recorded timing scaled by `rate`, with /clock published continuously at
   `clock_hz` for use_sim_time (also through the tail wait), as `ros2 bag play --clock` does;
2. records the node's outputs (`outputs`, default the node's resolved `~/output/*`, `~/debug/*` and
   /diagnostics) into an output bag (mcap) with their QoS profile, at the sim time they arrived;
3. scores the plans against the bag's own future odometry: ADE / FDE over the plan horizon in the
   ego frame at the plan stamp, and latency percentiles;
4. writes PNG frames (the three cameras with the plan projected, and a bird's-eye view).

With `start_node` it starts `python -m ddrive_ros.ros.node` (or `node_executable`) itself, on its own
ROS_DOMAIN_ID, its `~/input/*` remapped onto the bag's topics.
"""
from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ddrive_ros.bags.ground_truth import future_in_ego, odometry_track
from ddrive_ros.bags.io import BagWriter, bag_topics, read_messages
from ddrive_ros.evaluation import metrics
from ddrive_ros.observation_recipe import EgoTrack
from ddrive_ros.ros import convert
from ddrive_ros.ros import interface as I
from ddrive_ros.ros.convert import msg_class
from ddrive_ros.ros.domain_id import check_domain_id, domain_id_from_env
from ddrive_ros.ros.node_process import NodeProcess
from ddrive_ros.ros.spun_node import SpunNode
from ddrive_ros.ros.replay_frames import write_frames

log = logging.getLogger(__name__)

INPUT_PREFIXES = ("/camera/", "/odom", "/navigation/")


def default_outputs(node_name: str = I.NODE_NAME, namespace: str = "/") -> dict[str, str]:
    """Resolved output topic -> message type of a planner node of that name (what replay records)."""
    return {I.resolve(name, node_name, namespace): mtype for name, mtype in I.OUTPUT_TYPES.items()}


@dataclass
class ReplayOptions:
    bag: str | Path
    rate: float = 1.0
    out: str | Path | None = None  # folder for the recorded bag, report and PNG frames
    json: str | Path | None = None  # metrics JSON file
    frames: int = 6  # PNG frames to write (0: none)
    start_node: bool = False
    node_params: dict[str, Any] = field(default_factory=dict)
    node_remaps: dict[str, str] | None = None  # default: the node's inputs onto the bag's topics
    node_executable: list[str] | None = None  # default: python -m ddrive_ros.ros.node
    node_params_file: str | Path | None = None  # a ROS parameters file for the node (node_params override it)
    node_env: dict[str, str] | None = None  # the node's environment (default this process's)
    outputs: dict[str, str] | None = None  # topic -> msgtype to record; default: default_outputs()
    domain_id: int | None = None  # default: ROS_DOMAIN_ID from the environment (or derived from the pid)
    discovery_timeout_s: float = 90.0  # node start (model load, warm-up) + DDS discovery
    tail_s: float = 2.0  # wait after the last message for the last plan (/clock keeps running)
    clock_hz: float = 100.0  # /clock publishing rate, as `ros2 bag play --clock 100`
    rss_interval_s: float = 1.0
    node_log: str | Path | None = None
    storage: str = "mcap"  # of the recorded bag


# QoS the outputs are recorded under (what `ros2 bag play` offers when it plays them back)
def _recorded_qos():
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    never = QosTime(sec=0, nsec=0)
    return [Qos(history=QosHistory.KEEP_LAST, depth=10, reliability=QosReliability.RELIABLE,
                durability=QosDurability.VOLATILE, deadline=never, lifespan=never,
                liveliness=QosLiveliness.AUTOMATIC, liveliness_lease_duration=never,
                avoid_ros_namespace_conventions=False)]


# ---------------------------------------------------------------------------------- replay
class _Session:
    """The replayer's own rclpy node on the replay's domain: publishers for the bag's input topics
    and /clock, raw subscriptions recording the planner's outputs (CDR bytes, stamped with the
    sim time at which they were received)."""

    def __init__(self, domain: int, topics: dict[str, str], outputs: dict[str, str]):
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock

        self._spun = SpunNode("ddrive_replay", domain)
        self.node = self._spun.node
        reliable = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=100)
        self.recorded: list[tuple[str, str, int, bytes]] = []
        self._lock = threading.Lock()
        self.sim_now_ns = 0
        self.outputs = outputs
        for topic, mtype in outputs.items():
            self.node.create_subscription(msg_class(mtype), topic, self._recorder(topic, mtype), reliable, raw=True)
        self.pubs = {t: self.node.create_publisher(msg_class(m), t, reliable) for t, m in topics.items()}
        self.clock_pub = self.node.create_publisher(Clock, "/clock", reliable)
        self.clock = Clock()
        self._clock_origin: tuple[float, int, float] | None = None  # (monotonic, sim ns, rate)
        self._stop = threading.Event()
        self._spun.start()

    def _recorder(self, topic: str, mtype: str):
        def cb(data: bytes) -> None:
            with self._lock:
                self.recorded.append((topic, mtype, self.sim_now_ns, bytes(data)))
        return cb

    def run_clock(self, first_ns: int, rate: float, hz: float) -> None:
        """Publish /clock continuously from first_ns at `hz` (sim time runs at `rate`), until close."""
        self._clock_origin = (time.monotonic(), first_ns, rate)

        def loop() -> None:
            while not self._stop.wait(1.0 / hz):
                self.publish_clock(self.sim_ns())

        self.publish_clock(first_ns)
        threading.Thread(target=loop, name="replay_clock", daemon=True).start()

    def sim_ns(self) -> int:
        t0, first_ns, rate = self._clock_origin
        return first_ns + int((time.monotonic() - t0) * rate * 1e9)

    def publish_clock(self, t_ns: int) -> None:
        with self._lock:
            if t_ns < self.sim_now_ns:
                return  # sim time never goes back
            self.sim_now_ns = t_ns
            sec, nsec = divmod(t_ns, 1_000_000_000)
            self.clock.clock.sec, self.clock.clock.nanosec = int(sec), int(nsec)
            self.clock_pub.publish(self.clock)

    def outputs_recorded(self) -> list[tuple[str, str, int, bytes]]:
        with self._lock:
            return sorted(self.recorded, key=lambda r: r[2])

    def close(self) -> None:
        self._stop.set()
        self._spun.close()


def _wait_for_node(session: _Session, node_proc: NodeProcess | None, timeout_s: float) -> float:
    """Block until the planner's subscriptions and outputs are matched (they appear only after the
    model is loaded and warmed up); seconds waited."""
    t_wait = time.monotonic()
    needed_in = [t for t in session.pubs if "/camera/" in t and t.endswith(("image_raw", "compressed"))] + \
                [t for t in session.pubs if t.startswith("/odom")]
    needed_out = [t for t in session.outputs if t.endswith(("/output/path", "/output/plan"))]
    while True:
        if node_proc is not None and not node_proc.alive():
            raise RuntimeError(f"planner node exited with {node_proc.proc.returncode}:\n{node_proc.tail()}")
        ready_in = all(session.pubs[t].get_subscription_count() > 0 for t in needed_in)
        ready_out = all(session.node.count_publishers(t) > 0 for t in needed_out)
        if ready_in and ready_out:
            break
        if time.monotonic() - t_wait > timeout_s:
            tail = node_proc.tail() if node_proc else ""
            raise TimeoutError(f"no planner node matched within {timeout_s:.0f} s "
                               f"(inputs matched: {ready_in}, outputs {needed_out}: {ready_out})\n{tail}")
        time.sleep(0.1)
    time.sleep(0.5)  # let the remaining endpoints (diagnostics, latency) match too
    return round(time.monotonic() - t_wait, 2)


def _play(session: _Session, bag: Path, opts: ReplayOptions, node_proc: NodeProcess | None,
          rss: list[tuple[float, int]]) -> dict[str, Any]:
    """Publish the bag's inputs at their recorded timing (scaled by rate), with /clock running
    continuously (as `ros2 bag play --clock`), also through the tail wait."""
    start_wall = time.monotonic()
    first_ns = None
    last_rss = start_wall
    published = 0
    for topic, _mtype, t_ns, raw in read_messages(bag, set(session.pubs)):
        if first_ns is None:
            first_ns = t_ns
            session.run_clock(first_ns, max(opts.rate, 1e-6), opts.clock_hz)
            start_wall = time.monotonic()
        delay = start_wall + (t_ns - first_ns) * 1e-9 / max(opts.rate, 1e-6) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        session.publish_clock(t_ns)  # never behind the message about to go out
        session.pubs[topic].publish(raw)
        published += 1
        if node_proc is not None:
            if time.monotonic() - last_rss >= opts.rss_interval_s:
                last_rss = time.monotonic()
                rss.append((round(last_rss - start_wall, 2), node_proc.rss_kb()))
            if not node_proc.alive():
                raise RuntimeError(f"planner node died during replay:\n{node_proc.tail()}")
    wall = round(time.monotonic() - start_wall, 2)
    time.sleep(opts.tail_s)
    if node_proc is not None:
        rss.append((round(time.monotonic() - start_wall, 2), node_proc.rss_kb()))
    return {"published": published, "replay_wall_s": wall}


def replay(opts: ReplayOptions) -> dict[str, Any]:
    """Start the node (optionally), wait for it, play the bag, record its outputs, score, draw."""
    bag = Path(opts.bag)
    if not bag.is_dir():
        raise FileNotFoundError(f"bag folder {bag} not found")
    topics = {t: m for t, m in bag_topics(bag).items() if t.startswith(INPUT_PREFIXES)}
    if not topics:
        raise ValueError(f"{bag} has no camera / odometry / navigation topics")
    out = Path(opts.out) if opts.out else Path(tempfile.mkdtemp(prefix="ddrive_replay_"))
    out.mkdir(parents=True, exist_ok=True)
    domain = check_domain_id(opts.domain_id, "domain_id") if opts.domain_id is not None else domain_id_from_env()
    report: dict[str, Any] = {"bag": str(bag), "rate": opts.rate, "domain_id": domain}
    rss: list[tuple[float, int]] = []
    outputs = opts.outputs or default_outputs()
    node_proc = None
    if opts.start_node:
        compressed = any(t.endswith("/compressed") for t in topics if "/camera/" in t)
        params = {"use_sim_time": True, **({"camera_type": "compressed"} if compressed else {}), **opts.node_params}
        remaps = opts.node_remaps if opts.node_remaps is not None else I.bag_remaps(params.get("camera_type") == "compressed")
        node_proc = NodeProcess(params, domain, Path(opts.node_log or out / "node.log"), remaps=remaps,
                                executable=opts.node_executable, params_file=opts.node_params_file,
                                env=opts.node_env)
        log.info("started planner node pid %d on ROS_DOMAIN_ID %d", node_proc.pid, domain)
    session = _Session(domain, topics, outputs)
    try:
        report["node_wait_s"] = _wait_for_node(session, node_proc, opts.discovery_timeout_s)
        if node_proc is not None:
            report["node_pid"] = node_proc.pid
            rss.append((0.0, node_proc.rss_kb()))
        report.update(_play(session, bag, opts, node_proc, rss))
    finally:
        session.close()
        if node_proc is not None:
            report["node_exit_code"] = node_proc.stop()
            report["node_log"] = str(node_proc.log_path)
    report["node_rss_kb"] = rss
    recorded = session.outputs_recorded()
    rec_bag = out / "recorded"
    with BagWriter(rec_bag, storage=opts.storage, overwrite=True) as bag_out:
        for topic, mtype in outputs.items():
            bag_out.add(topic, mtype, qos=_recorded_qos())
        for topic, mtype, t_ns, raw in recorded:
            bag_out.write(topic, t_ns, raw)
    report["recorded_bag"] = str(rec_bag)
    outputs = parse_outputs(recorded)
    report["counts"] = {k: len(v) for k, v in outputs.items()}
    report.update(score(outputs["plans"], odometry_track(bag)))
    report["diagnostics_levels"] = _level_counts(outputs["diagnostics"])
    report["node_counters"] = node_counters(outputs["diagnostics"])
    if opts.frames > 0:
        report["frames"] = write_frames(bag, outputs["plans"], out, opts.frames)
    if opts.json:
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json).write_text(json.dumps(_jsonable(report), indent=2))
    report["outputs"] = outputs
    return report


# ---------------------------------------------------------------------------------- parsing
def parse_outputs(recorded: list[tuple[str, str, int, bytes]]) -> dict[str, list]:
    """Recorded CDR -> python: plans (JSON dicts), paths, latency, meta, diagnostics (dicts)."""
    from rclpy.serialization import deserialize_message

    out: dict[str, list] = {"plans": [], "paths": [], "latency": [], "meta": [], "diagnostics": [], "markers": [],
                            "processing_time_ms": [], "cyclic_time_ms": []}
    for topic, mtype, t_ns, raw in recorded:
        msg = deserialize_message(raw, msg_class(mtype))
        if topic.endswith("/output/plan"):
            out["plans"].append(json.loads(msg.data))
        elif topic.endswith("/output/path"):
            out["paths"].append({"stamp": convert.stamp_to_sec(msg.header.stamp), "frame_id": msg.header.frame_id,
                                 "pose_stamps": [convert.stamp_to_sec(p.header.stamp) for p in msg.poses],
                                 "xy": [(p.pose.position.x, p.pose.position.y) for p in msg.poses]})
        elif topic.endswith("/debug/latency"):
            out["latency"].append(json.loads(msg.data))
        elif topic.endswith("/debug/processing_time_ms"):
            out["processing_time_ms"].append(float(msg.data))
        elif topic.endswith("/debug/cyclic_time_ms"):
            out["cyclic_time_ms"].append(float(msg.data))
        elif topic.endswith("/output/meta_behavior"):
            out["meta"].append(json.loads(msg.data))
        elif topic.endswith("/output/markers"):
            out["markers"].append([(m.ns, m.id, m.type, m.action) for m in msg.markers])
        elif topic == "/diagnostics":
            out["diagnostics"].append({
                "stamp": convert.stamp_to_sec(msg.header.stamp), "recv_ns": t_ns,
                "status": [{"name": s.name, "level": int.from_bytes(s.level, "little") if isinstance(s.level, bytes)
                            else int(s.level), "message": s.message,
                            "values": {kv.key: kv.value for kv in s.values}} for s in msg.status]})
    return out


COUNTERS = ("ticks", "plans", "skipped_ticks", "catch_ups", "no_new_set", "late_sets", "warming_up", "fallback_plans")


def node_counters(diags: list[dict]) -> dict[str, int]:
    """The node's own totals (planning ticks, plans, ticks that found the planner busy, ...) from the last
    diagnostics message that carries them: what the node counted, not what the recorder happened to see."""
    for d in reversed(diags):
        for status in d["status"]:
            values = status.get("values", {})
            if "skipped_ticks" in values:
                return {k: int(values[k]) for k in COUNTERS if k in values}
    return {}


def _level_counts(diags: list[dict]) -> dict[str, int]:
    names = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
    counts: dict[str, int] = {}
    for d in diags:
        lvl = max((s["level"] for s in d["status"]), default=0)
        counts[names.get(lvl, str(lvl))] = counts.get(names.get(lvl, str(lvl)), 0) + 1
    return counts


def score(plans: list[dict], track: EgoTrack | None) -> dict[str, Any]:
    """ADE / FDE of the real (not fallback) plans against the bag's own future odometry, and latency
    percentiles per stage."""
    real = [p for p in plans if not p.get("fallback")]
    preds, truths, times = [], [], None
    for p in real:
        traj = np.array([[r["t"], r["x"], r["y"]] for r in p.get("trajectory", [])], dtype=float)
        if not len(traj):
            continue
        gt = future_in_ego(track, float(p["input_stamp"]), traj[:, 0])
        if gt is None:
            continue
        preds.append(traj[:, 1:3])
        truths.append(gt)
        times = traj[:, 0]
    disp = metrics.displacement_summary(preds, truths, times) if preds else {}
    stages: dict[str, list[float]] = {}
    for p in real:
        for k, v in p.get("latency_ms", {}).items():
            stages.setdefault(k, []).append(float(v))
    return {
        "plans": len(real),
        "fallback_plans": len(plans) - len(real),
        "scored_plans": len(preds),
        "ade_m": round(disp["ade"], 3) if disp else None,
        "fde_m": round(disp["fde"], 3) if disp else None,
        "horizon_s": float(times[-1]) if times is not None else None,
        "latency_ms": {k: metrics.percentiles(v) for k, v in stages.items()},
    }


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return o


def format_report(report: dict[str, Any]) -> str:
    lines = [f"bag {report['bag']}  rate {report['rate']}  plans {report.get('plans')} "
             f"(fallback {report.get('fallback_plans')}, scored {report.get('scored_plans')})",
             f"ADE {report.get('ade_m')} m   FDE@{report.get('horizon_s')}s {report.get('fde_m')} m",
             f"diagnostics {report.get('diagnostics_levels')}",
             "node counted " + (", ".join(f"{k} {v}" for k, v in report.get("node_counters", {}).items()) or "nothing"),
             f"{'stage':<14}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}  (ms)"]
    for k, v in report.get("latency_ms", {}).items():
        if v:
            lines.append(f"{k:<14}{v['p50']:>9.1f}{v['p90']:>9.1f}{v['p99']:>9.1f}{v['max']:>9.1f}")
    return "\n".join(lines)
