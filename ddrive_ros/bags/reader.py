"""Training samples from a ROS 2 bag, using only what the bag holds.

    samples, report = extract_samples("runs/bag", frame_spacing_s=0.5)
    print(report.summary())

Per anchor frame t0 (front camera, every `stride_s` within an episode, with 2 s of odometry before
and 5 s after): the front frames at t0 - frame_spacing_s and t0, the side cameras matched to each
by nearest stamp within `sync_tolerance_s`; ego state from /odom at t0 (speed and yaw rate from the
twist, accel as the backward difference of speed over 0.2 s, linear interpolation in time); past
positions and the 20-point future in the ego frame at t0; the latest navigation command; and the
labels published for t0 where present (`Sample.has_labels` says which sections are there).

Robustness: a bag that cannot be opened or read at all, or lacks a camera or odometry topic, raises
`BagError` naming the bag and the problem. Anything smaller is skipped and counted in the
`DropReport` by reason: unreadable messages, images with an unsupported encoding / wrong step /
wrong size / undecodable data, non-finite odometry, a storage file that ends early (what was read
before is used), and anchors that lose a frame, a side camera, odometry coverage or their future.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ddrive_ros.bags import topics as T
from ddrive_ros.bags.image_codec import ImageFormatError, check_raw, image_from_msg, stamp_to_ns
from ddrive_ros.bags.io import typestore
from ddrive_ros.observation import CAMERAS, NAV_COMMANDS
from ddrive_ros.observation_recipe import ANCHOR, EgoTrack, RecipeError, assemble, match_frames
from ddrive_ros.plan import MetaBehavior, Plan
from ddrive_ros.sample import LABEL_SCHEMA, Sample, future_in_range, label_schema, label_sections, label_waypoint_times
from ddrive_ros.timeline import FRAME_HISTORY_S, FUTURE_HORIZON_S, OUTPUT_TIMES, PAST_HORIZON_S
from ddrive_ros.trajectory import quaternion_to_yaw, wrap_angle

logger = logging.getLogger(__name__)

NS = 1_000_000_000
EPISODE_SPLIT_GAP_S = 1.0  # without episode markers, an odometry gap this long starts a new episode


class BagError(RuntimeError):
    """A bag that cannot give any samples. The message names the bag and the problem."""

    def __init__(self, bag: str | Path, problem: str) -> None:
        super().__init__(f"bag {bag}: {problem}")
        self.bag = str(bag)
        self.problem = problem


@dataclass
class DropReport:
    """What an extraction lost, by reason.

    `counts` holds drops: messages (deserialize_error:<topic>, image_<reason>, odom_nonfinite,
    nav_unknown_command, labels_*, storage_error) and anchors (sample_bad_image, camera_sync,
    missing_previous_frame, odom_coverage, odom_gap, future_out_of_range). `notes` counts what was
    filled in rather than dropped (labels_missing, nav_missing_used_follow_lane).
    """

    bag: str
    counts: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    samples: int = 0
    anchors: int = 0  # anchor frames considered
    episodes: int = 0
    warnings: list[str] = field(default_factory=list)

    def add(self, reason: str, n: int = 1) -> None:
        self.counts[reason] += n

    @property
    def dropped(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        lines = [f"{self.bag}: {self.samples} samples from {self.anchors} anchors in {self.episodes} episodes"]
        lines += [f"  dropped {reason:<32} {n}" for reason, n in sorted(self.counts.items())]
        lines += [f"  note    {reason:<32} {n}" for reason, n in sorted(self.notes.items())]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass
class _Odom:
    t: np.ndarray  # ns, sorted
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray  # unwrapped
    v: np.ndarray
    yaw_rate: np.ndarray


@dataclass
class _Frames:
    """Image stamps of one camera: header stamp (ns) -> (bag timestamp, error reason or None)."""

    topic: str
    compressed: bool
    stamps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bag_time: dict[int, int] = field(default_factory=dict)
    bad: dict[int, str] = field(default_factory=dict)


def _open(bag: Path):
    from rosbags.rosbag2 import Reader

    if not bag.exists():
        raise BagError(bag, "does not exist")
    try:
        reader = Reader(bag)
        reader.open()
    except BagError:
        raise
    except Exception as err:  # noqa: BLE001 - rosbags raises several kinds for a broken bag
        hint = ""
        if any(word in str(err).lower() for word in ("magic", "malformed", "truncat", "unexpected end")):
            hint = "; the storage file looks truncated or corrupt (`ros2 bag reindex` may recover an MCAP file)"
        raise BagError(bag, f"cannot be opened ({type(err).__name__}: {err}){hint}") from err
    return reader


def _read(reader, connections, report: DropReport, bag: Path, what: str, progress: bool):
    """Iterate (connection, timestamp, raw) and stop cleanly if the storage ends early."""
    total = sum(c.msgcount for c in connections)
    bar = tqdm(total=total, desc=f"read {what}", unit="msg", disable=not progress, leave=False)
    try:
        for item in reader.messages(connections=connections):
            bar.update(1)
            yield item
    except Exception as err:  # noqa: BLE001 - truncated/corrupt storage: keep what was read
        report.add("storage_error")
        report.warnings.append(f"storage ended early while reading {what}: {type(err).__name__}: {err}")
        logger.warning("bag %s: storage ended early while reading %s: %s", bag, what, err)
    finally:
        bar.close()


def _camera_topics(reader, bag: Path) -> dict[str, _Frames]:
    by_topic = {c.topic: c for c in reader.connections}
    out = {}
    for cam in CAMERAS:
        raw, comp = T.image_topic(cam), T.image_topic(cam, compressed=True)
        counts = {t: by_topic[t].msgcount for t in (raw, comp) if t in by_topic}
        if not counts:
            raise BagError(bag, f"missing camera topic {raw} (or {comp})")
        topic = raw if counts.get(raw, 0) > 0 else comp if counts.get(comp, 0) > 0 else None
        if topic is None:
            raise BagError(bag, f"camera topic {raw if raw in counts else comp} has no messages")
        out[cam] = _Frames(topic, topic == comp)
    if T.TOPIC_ODOM not in by_topic or by_topic[T.TOPIC_ODOM].msgcount == 0:
        raise BagError(bag, f"missing odometry topic {T.TOPIC_ODOM} or it has no messages")
    return out


def _parse_labels(text: str, bag_t: int, report: DropReport) -> tuple[int, dict[str, Any]] | None:
    """(stamp ns, valid sections) of a /ddrive/labels payload; the stamp field wins over the bag time
    because std_msgs/String has no header and a re-recorded bag shifts its timestamps."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        report.add("labels_bad_json")
        return None
    if not isinstance(data, dict):
        report.add("labels_bad_json")
        return None
    try:
        stamp = int(round(float(data.get("stamp", bag_t / NS)) * NS))
    except (TypeError, ValueError):
        stamp = bag_t
    out: dict[str, Any] = {}
    schema = label_schema()
    names = [f.name for f in schema.section("critical_objects").fields]
    objs = data.get("critical_objects")
    if isinstance(objs, dict) and set(objs) == set(names) and all(isinstance(v, bool) for v in objs.values()):
        out["critical_objects"] = {k: bool(objs[k]) for k in names}
    elif objs is not None:
        report.add("labels_invalid_critical_objects")
    text_ = data.get("explanation")
    if isinstance(text_, str) and text_:
        out["explanation"] = text_
    meta = data.get("future_meta_behavior")
    if isinstance(meta, dict):
        try:
            enums = {f.name: f.values for f in schema.section("future_meta_behavior").fields if f.type == "enum"}
            ok = all(meta[k] in vals for k, vals in enums.items())
            speed = float(meta["target_speed"])
            if ok and np.isfinite(speed):
                out["future_meta_behavior"] = MetaBehavior(meta["longitudinal"], meta["lateral"], speed,
                                                           meta["turn_signal"])
            else:
                report.add("labels_invalid_meta")
        except (KeyError, TypeError, ValueError):
            report.add("labels_invalid_meta")
    return stamp, out


def _first_pass(reader, bag: Path, cams: dict[str, _Frames], report: DropReport, progress: bool):
    ts = typestore()
    image_topics = {f.topic: name for name, f in cams.items()}
    wanted = set(image_topics) | {T.TOPIC_ODOM, T.TOPIC_NAV, T.TOPIC_LABELS, T.TOPIC_EPISODE}
    conns = [c for c in reader.connections if c.topic in wanted]
    odom_rows: list[tuple[int, float, float, float, float, float]] = []
    nav: list[tuple[int, str]] = []
    labels: dict[int, dict[str, Any]] = {}
    markers: list[tuple[int, dict]] = []
    stamps: dict[str, list[int]] = {name: [] for name in cams}
    for conn, bag_t, raw in _read(reader, conns, report, bag, "messages", progress):
        try:
            msg = ts.deserialize_cdr(raw, conn.msgtype)
        except Exception:  # noqa: BLE001 - one unreadable message is a drop, not a failure
            report.add(f"deserialize_error:{conn.topic}")
            continue
        topic = conn.topic
        if topic in image_topics:
            name = image_topics[topic]
            frames = cams[name]
            t = stamp_to_ns(msg.header.stamp)
            if not frames.compressed:
                try:
                    check_raw(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))
                except ImageFormatError as err:
                    report.add(f"image_{err.reason}")
                    frames.bad[t] = err.reason
            stamps[name].append(t)
            frames.bag_time[t] = bag_t
        elif topic == T.TOPIC_ODOM:
            p, q, tw = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist
            yaw = quaternion_to_yaw(q.x, q.y, q.z, q.w)
            row = (stamp_to_ns(msg.header.stamp), p.x, p.y, yaw, tw.linear.x, tw.angular.z)
            if not np.all(np.isfinite(row[1:])):
                report.add("odom_nonfinite")
                continue
            odom_rows.append(row)
        elif topic == T.TOPIC_NAV:
            if msg.data in NAV_COMMANDS:
                nav.append((bag_t, msg.data))
            else:
                report.add("nav_unknown_command")
        elif topic == T.TOPIC_LABELS:
            parsed = _parse_labels(msg.data, bag_t, report)
            if parsed is not None:
                labels[parsed[0]] = parsed[1]
        elif topic == T.TOPIC_EPISODE:
            try:
                markers.append((bag_t, json.loads(msg.data)))
            except json.JSONDecodeError:
                report.add("episode_marker_bad_json")
    for name, frames in cams.items():
        frames.stamps = np.array(sorted(set(stamps[name])), dtype=np.int64)
        if not len(frames.stamps):
            raise BagError(bag, f"no readable messages on camera topic {frames.topic}")
    if not odom_rows:
        raise BagError(bag, f"no usable messages on {T.TOPIC_ODOM}")
    arr = np.array(sorted(odom_rows), dtype=float)
    t_ns = np.array(sorted(r[0] for r in odom_rows), dtype=np.int64)
    keep = np.concatenate([[True], np.diff(t_ns) > 0])  # duplicate stamps: keep the first
    odom = _Odom(t_ns[keep], arr[keep, 1], arr[keep, 2], np.unwrap(arr[keep, 3]), arr[keep, 4], arr[keep, 5])
    nav.sort()
    return odom, nav, labels, sorted(markers, key=lambda m: m[0])


@dataclass
class _Episode:
    start_ns: int
    end_ns: int
    seed: int
    odom_t: np.ndarray  # ns stamps of the episode's odometry
    track: EgoTrack  # the same odometry, seconds, for the observation recipe


@dataclass
class _Inputs:
    """Everything the first pass found, except pixels."""

    cams: dict[str, _Frames]
    stamps_s: dict[str, np.ndarray]  # camera stamps in seconds, for the observation recipe
    nav: list[tuple[int, str]]
    nav_t: np.ndarray
    labels: dict[int, dict[str, Any]]
    label_t: np.ndarray


@dataclass
class _Options:
    spacing_s: float
    stride_ns: int
    tol_ns: int
    max_gap_s: float


@dataclass
class _Anchor:
    """One usable anchor frame: which pixels to fetch and everything else of its sample."""

    t0_ns: int
    episode: _Episode
    frames: list[list[tuple[str, int]]]  # [previous, current] x CAMERAS: (camera, stamp ns)
    nav_command: str
    future: np.ndarray
    future_yaw: np.ndarray
    future_speed: np.ndarray
    labels: dict[str, Any]


def _episodes(odom: _Odom, markers: list[tuple[int, dict]]) -> list[tuple[int, int, int]]:
    """(start_ns, end_ns, seed) per episode, from the markers or else from odometry gaps."""
    starts = [(t, m) for t, m in markers if isinstance(m, dict) and m.get("event") == "start"]
    ends = {m.get("episode"): t for t, m in markers if isinstance(m, dict) and m.get("event") == "end"}
    out = []
    if starts:
        for i, (t, m) in enumerate(starts):
            end = ends.get(m.get("episode"))
            if end is None:  # no end marker: up to the next start or the last odometry
                end = starts[i + 1][0] - 1 if i + 1 < len(starts) else int(odom.t[-1])
            seed = m.get("seed", -1)
            out.append((int(t), int(end), int(seed) if isinstance(seed, int) else -1))
        return out
    gaps = np.flatnonzero(np.diff(odom.t) > EPISODE_SPLIT_GAP_S * NS)
    bounds = np.concatenate([[0], gaps + 1, [len(odom.t)]])
    return [(int(odom.t[a]), int(odom.t[b - 1]), -1) for a, b in zip(bounds[:-1], bounds[1:])]


def extract_samples(bag_dir: str | Path, frame_spacing_s: float = FRAME_HISTORY_S, *, stride_s: float = 0.5,
                    sync_tolerance_s: float = 0.03, max_odom_gap_s: float = 0.25, progress: bool = True,
                    max_samples: int | None = None) -> tuple[list[Sample], DropReport]:
    """Build training samples from a bag. See the module docstring for what each field comes from."""
    bag = Path(bag_dir)
    report = DropReport(str(bag))
    reader = _open(bag)
    opts = _Options(frame_spacing_s, int(round(stride_s * NS)), int(round(sync_tolerance_s * NS)), max_odom_gap_s)
    try:
        cams = _camera_topics(reader, bag)
        odom, nav, labels, markers = _first_pass(reader, bag, cams, report, progress)
        inputs = _Inputs(cams, {c: f.stamps / NS for c, f in cams.items()}, nav,
                         np.array([t for t, _ in nav], dtype=np.int64), labels, np.array(sorted(labels), dtype=np.int64))
        anchors = _plan_anchors(odom, markers, inputs, report, opts, max_samples)
        images = _second_pass(reader, bag, cams, anchors, report, progress)
    finally:
        reader.close()
    samples = []
    for a in anchors:
        try:
            pixels = [[images[key] for key in row] for row in a.frames]
        except KeyError:
            report.add("sample_bad_image")
            continue
        samples.append(_to_sample(a, pixels, bag))
    report.samples = len(samples)
    if report.dropped:
        logger.info("%s", report.summary())
    return samples, report


def _plan_anchors(odom: _Odom, markers, inputs: _Inputs, report: DropReport, opts: _Options,
                  max_samples: int | None) -> list[_Anchor]:
    """Everything but the pixels for every usable anchor; drops counted by reason."""
    front = inputs.cams[ANCHOR]
    episodes = _episodes(odom, markers)
    report.episodes = len(episodes)
    past_ns, fut_ns = int(round(PAST_HORIZON_S * NS)), int(round(FUTURE_HORIZON_S * NS))
    tol = opts.tol_ns
    anchors: list[_Anchor] = []
    for ep_start, ep_end, seed in episodes:
        lo = int(np.searchsorted(odom.t, ep_start - tol))
        hi = int(np.searchsorted(odom.t, ep_end + tol, side="right"))
        if hi - lo < 2:
            report.add("episode_without_odometry")
            continue
        sl = slice(lo, hi)
        ep = _Episode(ep_start, ep_end, seed, odom.t[sl],
                      EgoTrack(odom.t[sl] / NS, odom.x[sl], odom.y[sl], odom.yaw[sl], odom.v[sl], odom.yaw_rate[sl]))
        o_first, o_last = int(ep.odom_t[0]), int(ep.odom_t[-1])
        cand = front.stamps[(front.stamps >= o_first + past_ns - tol) & (front.stamps + fut_ns <= o_last + tol)]
        last_taken = None
        for t0 in cand:
            t0 = int(t0)
            if last_taken is not None and t0 < last_taken + opts.stride_ns - tol:
                continue
            last_taken = t0
            report.anchors += 1
            a = _anchor(t0, ep, inputs, report, opts)
            if a is not None:
                anchors.append(a)
                if max_samples is not None and len(anchors) >= max_samples:
                    return anchors
    return anchors


def _anchor(t0: int, ep: _Episode, inputs: _Inputs, report: DropReport, opts: _Options) -> _Anchor | None:
    # frames: the observation recipe's choice, in seconds; back to the bag's ns stamps for the pixels
    try:
        matched = match_frames(inputs.stamps_s, t0 / NS, opts.tol_ns / NS, opts.spacing_s)
    except RecipeError as e:
        report.add("missing_previous_frame" if e.reason == "no_history" else "camera_sync")
        return None
    frames = []
    for row in matched:
        keys = []
        for cam, t in zip(CAMERAS, row):
            t_ns = int(inputs.cams[cam].stamps[np.argmin(np.abs(inputs.cams[cam].stamps - int(round(t * NS))))])
            if t_ns in inputs.cams[cam].bad:
                report.add("sample_bad_image")
                return None
            keys.append((cam, t_ns))
        frames.append(keys)
    # odometry coverage: [t0 - 2 s, t0 + 5 s] inside the episode's odometry, no gap over max_gap_s
    ot = ep.odom_t
    t_lo, t_hi = t0 - int(round(PAST_HORIZON_S * NS)), t0 + int(round(FUTURE_HORIZON_S * NS))
    slack = 1_000_000  # 1 ms of clock jitter at the ends
    if ot[0] > t_lo + slack or ot[-1] < t_hi - slack:
        report.add("odom_coverage")
        return None
    i_lo = max(int(np.searchsorted(ot, t_lo, side="right")) - 1, 0)
    i_hi = min(int(np.searchsorted(ot, t_hi)), len(ot) - 1)
    if i_hi > i_lo and np.max(np.diff(ot[i_lo:i_hi + 1])) > opts.max_gap_s * NS:
        report.add("odom_gap")
        return None
    t0_s = t0 / NS
    future = ep.track.in_ego_frame(t0_s, t0_s + OUTPUT_TIMES)
    if not future_in_range(future):
        report.add("future_out_of_range")
        return None
    states = ep.track.states(np.concatenate([[t0_s], t0_s + OUTPUT_TIMES]))
    # navigation command: the latest at or before t0 (within the episode)
    tol = opts.tol_ns
    i = int(np.searchsorted(inputs.nav_t, t0 + tol, side="right")) - 1
    if i >= 0 and inputs.nav_t[i] >= ep.start_ns - tol:
        command = inputs.nav[i][1]
    else:
        command = "FOLLOW_LANE"
        report.notes["nav_missing_used_follow_lane"] += 1
    lab = None
    if len(inputs.label_t):
        j = int(np.searchsorted(inputs.label_t, t0))
        for c in (j - 1, j):
            if 0 <= c < len(inputs.label_t) and abs(int(inputs.label_t[c]) - t0) <= tol:
                lab = inputs.labels[int(inputs.label_t[c])]
    if lab is None:
        report.notes["labels_missing"] += 1
    return _Anchor(t0, ep, frames, command, future, np.asarray(wrap_angle(states[1:, 2] - states[0, 2])),
                   states[1:, 3].copy(), lab or {})


def _second_pass(reader, bag, cams, anchors: list[_Anchor], report, progress) -> dict[tuple[str, int], np.ndarray]:
    ts = typestore()
    needed: dict[str, set[int]] = {cam: set() for cam in CAMERAS}
    for a in anchors:
        for row in a.frames:
            for cam, t in row:
                needed[cam].add(cams[cam].bag_time[t])
    by_topic = {cams[cam].topic: cam for cam in CAMERAS}
    conns = [c for c in reader.connections if c.topic in by_topic]
    out: dict[tuple[str, int], np.ndarray] = {}
    if not any(needed.values()):
        return out
    for conn, bag_t, raw in _read(reader, conns, report, bag, "images", progress):
        cam = by_topic[conn.topic]
        if bag_t not in needed[cam]:
            continue
        try:
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            t = stamp_to_ns(msg.header.stamp)
            rgb = image_from_msg(msg)
        except ImageFormatError as err:
            report.add(f"image_{err.reason}")
            continue
        except Exception:  # noqa: BLE001 - rosbags raises several kinds for a corrupt message; counted
            report.add(f"deserialize_error:{conn.topic}")
            continue
        out[(cam, t)] = rgb
    return out


def _to_sample(a: _Anchor, pixels: list[list[np.ndarray]], bag: Path) -> Sample:
    lab = a.labels
    has = {name: name in lab for name in label_sections()}
    has["trajectory"] = True
    t0_s = a.t0_ns / NS
    obs = assemble(pixels, a.episode.track, t0_s, a.nav_command,
                   meta={"episode_seed": a.episode.seed, "t0": (a.t0_ns - a.episode.start_ns) / NS})
    waypoint_times = label_waypoint_times()
    plan = Plan(schema=LABEL_SCHEMA, waypoints=a.future[np.searchsorted(OUTPUT_TIMES, waypoint_times - 1e-9)].copy(),
                waypoint_times=waypoint_times, critical_objects=lab.get("critical_objects", {}),
                explanation=lab.get("explanation", ""), meta=lab.get("future_meta_behavior"), stamp=t0_s)
    return Sample(observation=obs, future_xy=a.future, future_times=OUTPUT_TIMES.copy(), labels=plan, has_labels=has,
                  future_yaw=a.future_yaw, future_speed=a.future_speed, episode_seed=a.episode.seed,
                  t0=(a.t0_ns - a.episode.start_ns) / NS, source=str(bag))
