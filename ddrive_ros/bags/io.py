"""rosbag2 folders in and out over `rosbags` (no ROS 2 install, no rclpy).

    with BagWriter("out_bag") as bag:                    # MCAP by default, as Jazzy's `ros2 bag record`
        bag.add("/odom", "nav_msgs/msg/Odometry")
        bag.write("/odom", t_ns, msg_or_cdr_bytes)
    for topic, msgtype, t_ns, cdr in read_messages("out_bag", {"/odom"}): ...

Messages are rosbags typestore objects (serialised here) or CDR bytes as they came off the wire.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

STORAGES = ("mcap", "sqlite3")
# a message hook: (topic, message) -> message to write, or None to drop it (tests use it to corrupt bags)
MessageHook = Callable[[str, Any], Any]

_TYPESTORE = None


def typestore():
    """The ROS 2 Jazzy message definitions of rosbags (one shared instance)."""
    global _TYPESTORE
    if _TYPESTORE is None:
        from rosbags.typesys import Stores, get_typestore

        _TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
    return _TYPESTORE


class BagWriter:
    """One rosbag2 folder: connections by topic, per-topic counts, optional QoS profiles."""

    def __init__(self, path: str | Path, storage: str = "mcap", overwrite: bool = False,
                 hook: MessageHook | None = None) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")
        self.path = Path(path)
        if self.path.exists():
            if not overwrite:
                raise FileExistsError(f"bag folder {self.path} exists")
            shutil.rmtree(self.path)
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self.writer = Writer(self.path, version=Writer.VERSION_LATEST, storage_plugin=plugin)
        self.writer.open()
        self.storage = storage
        self.ts = typestore()
        self.hook = hook
        self.conns: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    def add(self, topic: str, msgtype: str, qos: list | None = None) -> None:
        kwargs = {"offered_qos_profiles": qos} if qos else {}
        self.conns[topic] = self.writer.add_connection(topic, msgtype, typestore=self.ts, **kwargs)
        self.counts[topic] = 0

    def write(self, topic: str, t_ns: int, msg: Any, msgtype: str | None = None) -> None:
        """Write a typestore message or CDR bytes; `msgtype` adds the topic on first use."""
        if topic not in self.conns:
            if msgtype is None:
                raise KeyError(f"topic {topic} was never added to {self.path}; pass msgtype or call add()")
            self.add(topic, msgtype)
        if self.hook is not None:
            msg = self.hook(topic, msg)
            if msg is None:
                return
        conn = self.conns[topic]
        data = bytes(msg) if isinstance(msg, (bytes, bytearray, memoryview)) else self.ts.serialize_cdr(msg, conn.msgtype)
        self.writer.write(conn, int(t_ns), data)
        self.counts[topic] += 1

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_messages(path: str | Path, topics: set[str] | None = None) -> Iterator[tuple[str, str, int, bytes]]:
    """(topic, msgtype, log time ns, CDR bytes) in log-time order."""
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, t_ns, raw in reader.messages(connections=conns):
            yield conn.topic, conn.msgtype, t_ns, bytes(raw)


def bag_topics(path: str | Path) -> dict[str, str]:
    """topic -> message type of a bag folder."""
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


def deserialize(cdr: bytes, msgtype: str):
    """A typestore message from CDR bytes."""
    return typestore().deserialize_cdr(cdr, msgtype)
