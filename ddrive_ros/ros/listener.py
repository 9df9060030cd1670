"""Watching a live planner node from another process: `Listener` is this process's own rclpy node
on the planner's ROS_DOMAIN_ID; it records plans, paths and diagnostics with receive times and calls
the planner's services (parameters, lifecycle). `start_feed` starts a sensor feed process
(`ddrive_ros.ros.feed`). Tests and bench/node_camera_load.py use both."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ddrive_ros.ros import interface as I
from ddrive_ros.ros.spun_node import SpunNode


def start_feed(domain: int, log_path: Path, env: dict[str, str] | None = None, **options: Any) -> subprocess.Popen:
    """`python -m ddrive_ros.ros.feed` with FeedOptions as keyword arguments, on that domain."""
    import os

    args = [sys.executable, "-m", "ddrive_ros.ros.feed"]
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else ([] if v is False else [flag, str(v)])
    env = dict(os.environ if env is None else env, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    return subprocess.Popen(args, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


def level(status) -> int:
    return status.level[0] if isinstance(status.level, (bytes, bytearray)) else int(status.level)


class Listener:
    """Records the planner's plans and diagnostics (with wall receive times) and calls its services."""

    SETTLE_S = 0.5  # a fresh service client's wait before its first request (see _client)

    def __init__(self, domain: int, node_name: str = I.NODE_NAME):
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import String

        self._spun = SpunNode("ddrive_test_listener", domain)
        self.node = self._spun.node
        self.node_name = node_name
        self.lock = threading.Lock()
        self.plans: list[tuple[float, dict]] = []
        self.diagnostics: list[tuple[float, dict[str, tuple[int, str, dict[str, str]]]]] = []
        from nav_msgs.msg import Path as PathMsg

        self.paths: list[tuple[float, str, list[tuple[float, float]]]] = []  # stamp, frame_id, xy
        self.node.create_subscription(String, I.resolve(I.OUTPUT_PLAN, node_name), self._on_plan, 50)
        self.node.create_subscription(PathMsg, I.resolve(I.OUTPUT_PATH, node_name), self._on_path, 50)
        from std_msgs.msg import Float64

        self.processing_ms: list[tuple[float, float]] = []  # receive time, ~/debug/processing_time_ms
        self.node.create_subscription(Float64, I.resolve(I.DEBUG_PROCESSING_MS, node_name), self._on_processing, 50)
        self.node.create_subscription(DiagnosticArray, I.DIAGNOSTICS, self._on_diag, 50)
        self._clients: dict[tuple[str, Any], Any] = {}
        self._settled: set[tuple[str, Any]] = set()
        self._spun.start()

    def _on_plan(self, msg) -> None:
        with self.lock:
            self.plans.append((time.monotonic(), json.loads(msg.data)))

    def _on_processing(self, msg) -> None:
        with self.lock:
            self.processing_ms.append((time.monotonic(), float(msg.data)))

    def _on_path(self, msg) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self.lock:
            self.paths.append((stamp, msg.header.frame_id, [(q.pose.position.x, q.pose.position.y) for q in msg.poses]))

    def _on_diag(self, msg) -> None:
        st = {s.name.split(": ", 1)[-1]: (level(s), s.message, {kv.key: kv.value for kv in s.values}) for s in msg.status}
        with self.lock:
            self.diagnostics.append((time.monotonic(), st))

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with self.lock:
                got = predicate()
            if got:
                return got
            time.sleep(0.05)
        raise TimeoutError(f"{what} not seen within {timeout:.0f} s")

    def planning(self) -> tuple[int, str, dict[str, str]] | None:
        with self.lock:
            for _, st in reversed(self.diagnostics):
                if "planning" in st:
                    return st["planning"]
        return None

    def _client(self, service: str, srv_type, timeout: float):
        """One client per service, kept: a fresh client is matched by DDS discovery again, and Fast DDS drops a
        response when the server has not yet matched the client's response reader (it waits 100 ms, then logs
        "client will not receive response"; ros2/rmw_fastrtps#390, #467). wait_for_service only sees the client's
        side of that match, so a fresh client also waits `SETTLE_S` before its first request."""
        key = (service, srv_type)
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv_type, f"/{self.node_name}/{service}")
        client = self._clients[key]
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service /{self.node_name}/{service} not available")
        if key not in self._settled:  # the first request after the service was seen
            time.sleep(self.SETTLE_S)
            self._settled.add(key)
        return client

    def call(self, service: str, srv_type, request, timeout: float = 10.0, resend_every: float | None = None):
        """Calls /<node>/<service> and waits up to `timeout` s for the answer. `resend_every`: for idempotent
        requests (get_state, get_parameters), send the request again after that many seconds without an answer,
        so one response lost to discovery costs seconds, not the call. Never resend a state change."""
        client = self._client(service, srv_type, timeout)
        t0 = time.monotonic()
        future, sent = client.call_async(request), t0
        while not future.done():
            now = time.monotonic()
            if now - t0 > timeout:
                raise TimeoutError(f"/{self.node_name}/{service} did not answer within {timeout:.0f} s")
            if resend_every is not None and now - sent > resend_every:
                future, sent = client.call_async(request), now
            time.sleep(0.01)
        return future.result()

    def set_parameters(self, **values: Any):
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        req = SetParameters.Request(parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()])
        return self.call("set_parameters", SetParameters, req).results  # not resent: a set may act on the node

    def get_parameters(self, *names: str):
        from rcl_interfaces.srv import GetParameters

        return self.call("get_parameters", GetParameters, GetParameters.Request(names=list(names)),
                         resend_every=2.0).values

    def close(self) -> None:
        self._spun.close()
