"""Replay a rosbag2 into a live planner node without the ROS 2 CLI, record its outputs, score them.

    report = replay(ReplayOptions(bag="demo_out/input_bag", start_node=True, out="demo_out"))

1. reads the bag with rosbags and publishes every topic (CDR bytes as recorded, so nothing is
   re-encoded) at its recorded timing scaled by `rate`, with /clock for use_sim_time;
2. records the node's outputs (Path, plan JSON, meta, markers, latency, diagnostics) into an output
   bag with rosbags;
3. scores the plans against the bag's own future odometry: ADE / FDE over the plan horizon in the
   ego frame at the plan stamp, and latency percentiles;
4. writes PNG frames (the three cameras with the plan projected, and a bird's-eye view).

With `start_node` it starts `python -m ddrive_ros.ros.node` itself, on its own ROS_DOMAIN_ID.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ddrive_ros.ros import convert
from ddrive_ros.bags.io import BagWriter, bag_topics, read_messages
from ddrive_ros.ros.convert import msg_class
from ddrive_ros.trajectory import world_to_ego

log = logging.getLogger(__name__)

OUTPUTS = {  # default output topic -> msgtype (the node's defaults; ~/latency resolves to /ddrive_planner/latency)
    "/ddrive/path": "nav_msgs/msg/Path",
    "/ddrive/plan": "std_msgs/msg/String",
    "/ddrive/meta_behavior": "std_msgs/msg/String",
    "/ddrive/markers": "visualization_msgs/msg/MarkerArray",
    "/ddrive_planner/latency": "std_msgs/msg/String",
    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
}
INPUT_PREFIXES = ("/camera/", "/odom", "/navigation/")


def default_domain_id() -> int:
    return os.getpid() % 200 + 20


@dataclass
class ReplayOptions:
    bag: str | Path
    rate: float = 1.0
    out: str | Path | None = None  # folder for the recorded bag, report and PNG frames
    json: str | Path | None = None  # metrics JSON file
    frames: int = 6  # PNG frames to write (0: none)
    start_node: bool = False
    node_params: dict[str, Any] = field(default_factory=dict)
    domain_id: int | None = None  # default: ROS_DOMAIN_ID from the environment (or derived from the pid)
    discovery_timeout_s: float = 90.0  # node start (model load, warm-up) + DDS discovery
    tail_s: float = 2.0  # wait after the last message for the last plan
    rss_interval_s: float = 1.0
    node_log: str | Path | None = None


class _NodeProcess:
    def __init__(self, params: dict[str, Any], env: dict[str, str], log_path: Path):
        args = [sys.executable, "-m", "ddrive_ros.ros.node", "--ros-args"]
        for k, v in params.items():
            args += ["-p", f"{k}:={_param_text(v)}"]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        return self.proc.returncode

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-n:])
        except OSError:
            return ""


def _param_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------------- replay
def replay(opts: ReplayOptions) -> dict[str, Any]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    bag = Path(opts.bag)
    if not bag.is_dir():
        raise FileNotFoundError(f"bag folder {bag} not found")
    topics = {t: m for t, m in bag_topics(bag).items() if t.startswith(INPUT_PREFIXES)}
    if not topics:
        raise ValueError(f"{bag} has no camera / odometry / navigation topics")
    out = Path(opts.out) if opts.out else Path(tempfile.mkdtemp(prefix="ddrive_replay_"))
    out.mkdir(parents=True, exist_ok=True)
    domain = opts.domain_id if opts.domain_id is not None else int(os.environ.get("ROS_DOMAIN_ID", default_domain_id()))

    node_proc = None
    if opts.start_node:
        env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
        params = {"use_sim_time": True, **opts.node_params}
        node_proc = _NodeProcess(params, env, Path(opts.node_log or out / "node.log"))
        log.info("started planner node pid %d on ROS_DOMAIN_ID %d", node_proc.pid, domain)

    context = rclpy.Context()
    rclpy.init(args=[], context=context, domain_id=domain)
    node = rclpy.create_node("ddrive_replay", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    reliable = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=100)
    recorded: list[tuple[str, str, int, bytes]] = []
    rec_lock = threading.Lock()
    sim_now_ns = [0]

    def recorder(topic: str, mtype: str):
        def cb(data: bytes) -> None:
            with rec_lock:
                recorded.append((topic, mtype, sim_now_ns[0], bytes(data)))
        return cb

    for topic, mtype in OUTPUTS.items():
        node.create_subscription(msg_class(mtype), topic, recorder(topic, mtype), reliable, raw=True)
    pubs = {t: node.create_publisher(msg_class(m), t, reliable) for t, m in topics.items()}
    clock_pub = node.create_publisher(Clock, "/clock", reliable)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()

    rss: list[tuple[float, int]] = []
    report: dict[str, Any] = {"bag": str(bag), "rate": opts.rate, "domain_id": domain}
    try:
        # ---- wait for the node: its subscriptions appear only after the model is loaded and warmed up
        t_wait = time.monotonic()
        needed_in = [t for t in pubs if "/camera/" in t and t.endswith(("image_raw", "compressed"))] + \
                    [t for t in pubs if t.startswith("/odom")]
        while True:
            if node_proc is not None and not node_proc.alive():
                raise RuntimeError(f"planner node exited with {node_proc.proc.returncode}:\n{node_proc.tail()}")
            ready_in = all(pubs[t].get_subscription_count() > 0 for t in needed_in)
            ready_out = all(node.count_publishers(t) > 0 for t in ("/ddrive/path", "/ddrive/plan"))
            if ready_in and ready_out:
                break
            if time.monotonic() - t_wait > opts.discovery_timeout_s:
                tail = node_proc.tail() if node_proc else ""
                raise TimeoutError(f"no planner node matched within {opts.discovery_timeout_s:.0f} s "
                                   f"(inputs matched: {ready_in}, outputs: {ready_out})\n{tail}")
            time.sleep(0.1)
        time.sleep(0.5)  # let the remaining endpoints (diagnostics, latency) match too
        report["node_wait_s"] = round(time.monotonic() - t_wait, 2)
        if node_proc is not None:
            report["node_pid"] = node_proc.pid
            rss.append((0.0, rss_kb(node_proc.pid) or -1))

        # ---- publish with recorded timing
        start_wall = time.monotonic()
        first_ns = None
        last_rss = start_wall
        published = 0
        clock = Clock()
        for topic, _mtype, t_ns, raw in read_messages(bag, set(pubs)):
            if first_ns is None:
                first_ns = t_ns
            due = start_wall + (t_ns - first_ns) * 1e-9 / max(opts.rate, 1e-6)
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if t_ns > sim_now_ns[0]:
                sim_now_ns[0] = t_ns
                sec, nsec = divmod(t_ns, 1_000_000_000)
                clock.clock.sec, clock.clock.nanosec = int(sec), int(nsec)
                clock_pub.publish(clock)
            pubs[topic].publish(raw)
            published += 1
            if node_proc is not None and time.monotonic() - last_rss >= opts.rss_interval_s:
                last_rss = time.monotonic()
                rss.append((round(last_rss - start_wall, 2), rss_kb(node_proc.pid) or -1))
            if node_proc is not None and not node_proc.alive():
                raise RuntimeError(f"planner node died during replay:\n{node_proc.tail()}")
        report["published"] = published
        report["replay_wall_s"] = round(time.monotonic() - start_wall, 2)
        time.sleep(opts.tail_s)
        if node_proc is not None:
            rss.append((round(time.monotonic() - start_wall, 2), rss_kb(node_proc.pid) or -1))
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        if node_proc is not None:
            report["node_exit_code"] = node_proc.stop()
            report["node_log"] = str(node_proc.log_path)
    report["node_rss_kb"] = rss

    with rec_lock:
        recorded.sort(key=lambda r: r[2])
    rec_bag = out / "recorded"
    with BagWriter(rec_bag, overwrite=True) as bag_out:
        for topic, mtype, t_ns, raw in recorded:
            bag_out.write(topic, t_ns, raw, msgtype=mtype)
    report["recorded_bag"] = str(rec_bag)
    outputs = parse_outputs(recorded)
    report["counts"] = {k: len(v) for k, v in outputs.items()}
    report.update(score(outputs["plans"], load_odometry(bag)))
    report["diagnostics_levels"] = _level_counts(outputs["diagnostics"])
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

    out: dict[str, list] = {"plans": [], "paths": [], "latency": [], "meta": [], "diagnostics": [], "markers": []}
    for topic, mtype, t_ns, raw in recorded:
        msg = deserialize_message(raw, msg_class(mtype))
        if topic == "/ddrive/plan":
            out["plans"].append(json.loads(msg.data))
        elif topic == "/ddrive/path":
            out["paths"].append({"stamp": convert.stamp_to_sec(msg.header.stamp), "frame_id": msg.header.frame_id,
                                 "pose_stamps": [convert.stamp_to_sec(p.header.stamp) for p in msg.poses],
                                 "xy": [(p.pose.position.x, p.pose.position.y) for p in msg.poses]})
        elif topic == "/ddrive_planner/latency":
            out["latency"].append(json.loads(msg.data))
        elif topic == "/ddrive/meta_behavior":
            out["meta"].append(json.loads(msg.data))
        elif topic == "/ddrive/markers":
            out["markers"].append([(m.ns, m.id, m.type, m.action) for m in msg.markers])
        elif topic == "/diagnostics":
            out["diagnostics"].append({
                "stamp": convert.stamp_to_sec(msg.header.stamp), "recv_ns": t_ns,
                "status": [{"name": s.name, "level": int.from_bytes(s.level, "little") if isinstance(s.level, bytes)
                            else int(s.level), "message": s.message,
                            "values": {kv.key: kv.value for kv in s.values}} for s in msg.status]})
    return out


def _level_counts(diags: list[dict]) -> dict[str, int]:
    names = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
    counts: dict[str, int] = {}
    for d in diags:
        lvl = max((s["level"] for s in d["status"]), default=0)
        counts[names.get(lvl, str(lvl))] = counts.get(names.get(lvl, str(lvl)), 0) + 1
    return counts


def load_odometry(bag: str | Path, topic: str = "/odom") -> np.ndarray:
    """(N, 4) t, x, y, yaw of the bag's valid odometry messages (by header stamp)."""
    from rclpy.serialization import deserialize_message

    rows = []
    for _t, mtype, _ns, raw in read_messages(bag, {topic}):
        try:
            t, x, y, yaw, _v, _w = convert.odometry_to_state(deserialize_message(raw, msg_class(mtype)))
        except convert.InvalidMessage:
            continue
        rows.append((t, x, y, yaw))
    arr = np.array(rows, dtype=float).reshape(-1, 4)
    return arr[np.argsort(arr[:, 0])] if len(arr) else arr


def future_in_ego(odom: np.ndarray, t0: float, times: np.ndarray) -> np.ndarray | None:
    """Ground-truth positions at t0 + times in the ego frame at t0, or None outside the odometry."""
    if len(odom) < 2 or t0 < odom[0, 0] or t0 + times[-1] > odom[-1, 0] + 1e-6:
        return None
    yaw = np.unwrap(odom[:, 3])
    x0, y0, yaw0 = (np.interp(t0, odom[:, 0], c) for c in (odom[:, 1], odom[:, 2], yaw))
    tt = t0 + times
    pts = np.stack([np.interp(tt, odom[:, 0], odom[:, 1]), np.interp(tt, odom[:, 0], odom[:, 2])], axis=1)
    return world_to_ego(pts, (x0, y0), yaw0)


def _pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p90": round(float(np.percentile(a, 90)), 2),
            "p99": round(float(np.percentile(a, 99)), 2), "max": round(float(a.max()), 2), "n": int(a.size)}


def score(plans: list[dict], odom: np.ndarray) -> dict[str, Any]:
    real = [p for p in plans if not p.get("fallback")]
    ades, fdes = [], []
    for p in real:
        traj = np.array([[r["t"], r["x"], r["y"]] for r in p.get("trajectory", [])], dtype=float)
        if not len(traj):
            continue
        gt = future_in_ego(odom, float(p["input_stamp"]), traj[:, 0])
        if gt is None:
            continue
        err = np.linalg.norm(traj[:, 1:3] - gt, axis=1)
        ades.append(float(err.mean()))
        fdes.append(float(err[-1]))
    stages: dict[str, list[float]] = {}
    for p in real:
        for k, v in p.get("latency_ms", {}).items():
            stages.setdefault(k, []).append(float(v))
    return {
        "plans": len(real),
        "fallback_plans": len(plans) - len(real),
        "scored_plans": len(ades),
        "ade_m": round(float(np.mean(ades)), 3) if ades else None,
        "fde_m": round(float(np.mean(fdes)), 3) if fdes else None,
        "horizon_s": float(real[0]["trajectory"][-1]["t"]) if real and real[0].get("trajectory") else None,
        "latency_ms": {k: _pct(v) for k, v in stages.items()},
    }


# ---------------------------------------------------------------------------------- pictures
def write_frames(bag: str | Path, plans: list[dict], out: Path, n: int) -> list[str]:
    """PNG per selected plan: three cameras (plan projected with the rig's camera model) + bird's-eye view."""
    import cv2
    from rclpy.serialization import deserialize_message

    from ddrive_ros.observation import CAMERAS

    real = [p for p in plans if not p.get("fallback") and p.get("trajectory")]
    if not real:
        return []
    pick = [real[int(i)] for i in np.unique(np.linspace(0, len(real) - 1, min(n, len(real))).round())]
    want = {round(float(p["input_stamp"]), 6): p for p in pick}
    images: dict[float, dict[str, np.ndarray]] = {}
    cam_topics = {t: t.split("/")[2] for t in bag_topics(bag)
                  if t.startswith("/camera/") and t.count("/") >= 3 and t.endswith(("image_raw", "compressed"))}
    cam_topics = {t: c for t, c in cam_topics.items() if c in CAMERAS}
    for topic, mtype, _ns, raw in read_messages(bag, set(cam_topics)):
        msg = deserialize_message(raw, msg_class(mtype))
        key = round(convert.stamp_to_sec(msg.header.stamp), 6)
        if key in want:
            try:
                images.setdefault(key, {})[cam_topics[topic]] = convert.image_to_rgb(msg)
            except convert.InvalidMessage:
                pass
    odom = load_odometry(bag)
    frames_dir = out / "frames"
    frames_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, (key, plan) in enumerate(sorted(want.items())):
        traj = np.array([[r["t"], r["x"], r["y"]] for r in plan["trajectory"]], dtype=float)
        gt = future_in_ego(odom, float(plan["input_stamp"]), traj[:, 0])
        cams = images.get(key, {})
        panels = []
        for cam in CAMERAS:
            img = cams.get(cam)
            panels.append(_draw_camera(img, cam, traj[:, 1:3], gt) if img is not None
                          else np.zeros((96, 160, 3), np.uint8))
        h = max(p.shape[0] for p in panels)
        panels = [cv2.resize(p, (int(p.shape[1] * h / p.shape[0]), h)) for p in panels]
        strip = np.concatenate(panels, axis=1)
        scale = max(1, 480 // strip.shape[1])
        strip = cv2.resize(strip, (strip.shape[1] * scale, strip.shape[0] * scale), interpolation=cv2.INTER_NEAREST)
        bev = _draw_bev(traj[:, 1:3], gt, strip.shape[0] * 2, plan)
        canvas = np.concatenate([strip, np.zeros((bev.shape[0], strip.shape[1], 3), np.uint8)], axis=0)
        canvas[strip.shape[0]:, : bev.shape[1]] = bev[:, : canvas.shape[1]]
        meta = plan.get("future_meta_behavior", {})
        cv2.putText(canvas, f"t={plan['input_stamp']:.2f}s {convert.meta_text(meta)}", (bev.shape[1] + 5, strip.shape[0] + 15),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        path = frames_dir / f"frame_{i:03d}.png"
        cv2.imwrite(str(path), cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR))
        written.append(str(path))
    return written


def _draw_camera(img: np.ndarray, cam_name: str, plan_xy: np.ndarray, gt_xy: np.ndarray | None) -> np.ndarray:
    import cv2

    from ddrive_ros.sim.camera import default_cameras

    img = img.copy()
    cam = {c.name: c for c in default_cameras(img.shape[1], img.shape[0])}[cam_name]
    for xy, col in ((gt_xy, (0, 255, 0)), (plan_xy, (255, 60, 60))):
        if xy is None:
            continue
        pts = np.concatenate([np.zeros((len(xy), 0)), xy, np.zeros((len(xy), 1))], axis=1)
        uv, front = cam.project(pts)
        uv = uv[front]
        if len(uv) >= 2 and np.all(np.isfinite(uv)):
            cv2.polylines(img, [np.clip(uv, -1e4, 1e4).astype(np.int32)], False, col, 1, cv2.LINE_AA)
    return img


def _draw_bev(plan_xy: np.ndarray, gt_xy: np.ndarray | None, size: int, plan: dict) -> np.ndarray:
    """Bird's-eye view: ego at the bottom centre, x forward (up), 1 px = 60 m / size."""
    import cv2

    img = np.full((size, size, 3), 30, np.uint8)
    m_per_px = 60.0 / size

    def to_px(xy: np.ndarray) -> np.ndarray:
        return np.stack([size / 2 - xy[:, 1] / m_per_px, size - 10 - xy[:, 0] / m_per_px], axis=1).astype(np.int32)

    for d in range(0, 61, 10):
        y = int(size - 10 - d / m_per_px)
        cv2.line(img, (0, y), (size, y), (60, 60, 60), 1)
    cv2.rectangle(img, (size // 2 - 4, size - 18), (size // 2 + 4, size - 2), (200, 200, 200), -1)
    if gt_xy is not None:
        cv2.polylines(img, [to_px(gt_xy)], False, (0, 255, 0), 2, cv2.LINE_AA)
    for r in plan.get("rollouts", []):
        cv2.polylines(img, [to_px(np.asarray(r, float)[:, :2])], False, (120, 120, 255), 1, cv2.LINE_AA)
    cv2.polylines(img, [to_px(plan_xy)], False, (255, 60, 60), 2, cv2.LINE_AA)
    for x, y in to_px(np.array([[w["x"], w["y"]] for w in plan.get("waypoints", [])]).reshape(-1, 2)):
        cv2.circle(img, (int(x), int(y)), 3, (255, 200, 0), -1)
    cv2.putText(img, "plan (red) / odometry future (green)", (5, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                (220, 220, 220), 1, cv2.LINE_AA)
    return img


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
             f"{'stage':<14}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}  (ms)"]
    for k, v in report.get("latency_ms", {}).items():
        if v:
            lines.append(f"{k:<14}{v['p50']:>9.1f}{v['p90']:>9.1f}{v['p99']:>9.1f}{v['max']:>9.1f}")
    return "\n".join(lines)
