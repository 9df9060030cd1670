"""An rclpy node in its own context and ROS domain, spun by a background thread.

The replayer, the simulator bridge and the test listener each talk to a planner node in another
process this way. `close()` is bounded: it stops the executor, waits for the spin thread, and only
then destroys the node and shuts the context down (destroying a node while the executor still
waits on its handles can block for good on a loaded machine).
"""
from __future__ import annotations

import logging
import threading

from ddrive_ros.ros.domain_id import check_domain_id

log = logging.getLogger(__name__)


class SpunNode:
    """`node`: the rclpy node; `rclpy`: the module; `context`: its own context on `domain_id`."""

    def __init__(self, name: str, domain_id: int):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(args=[], context=self.context, domain_id=check_domain_id(domain_id, f"{name} domain_id"))
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        """Start spinning (after the subscriptions and publishers exist)."""
        self._thread = threading.Thread(target=self._spin, name=f"{self.node.get_name()}_spin", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass  # close() shut the context down under a spin that did not stop in time: the intended end

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop spinning, then destroy the node and shut the context down; never blocks for long."""
        if self._closed:
            return
        self._closed = True
        if not self.executor.shutdown(timeout_sec=timeout_s):
            log.warning("%s: executor callbacks still running after %.0f s", self.node.get_name(), timeout_s)
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                # shutting the context down wakes any wait set the thread is blocked in
                log.warning("%s: spin thread still alive after %.0f s; shutting its context down first",
                            self.node.get_name(), timeout_s)
                self.rclpy.try_shutdown(context=self.context)
                self._thread.join(timeout_s)
                if self._thread.is_alive():
                    log.error("%s: spin thread did not stop; leaving the node to process exit", self.node.get_name())
                    return
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
