"""The managed (lifecycle) planner node: `ddrive_planner_managed`, driven by `ros2 lifecycle set`.

    unconfigured --configure--> inactive: model loaded and warmed up, buffers and publishers made
    inactive     --activate---> active:   subscriptions and timers start, plans flow
    active       --deactivate-> inactive: subscriptions and timers go; the model stays loaded
    inactive     --cleanup----> unconfigured: model, buffers, publishers and worker released

Same behaviour as the plain node (`PlannerCore`); only when each stage runs differs.
"""
from __future__ import annotations

from typing import Any

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from ddrive_ros.ros import interface as I
from ddrive_ros.ros.node import PlannerCore, main as _main


class ManagedPlannerNode(PlannerCore, LifecycleNode):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(I.NODE_NAME, **kwargs)
        self._declare()  # parameters can be set before configure

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._load()
        except Exception as e:  # noqa: BLE001 - a bad checkpoint fails the transition with its reason
            self.get_logger().error(f"configure failed: {type(e).__name__}: {e}")
            return TransitionCallbackReturn.FAILURE
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._start()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop()
        self.get_logger().info("deactivated: subscriptions and timers stopped, model kept")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._unload()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._loaded:
            self._stop()
            self._unload()
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self) -> None:
        if self._loaded:
            self._stop()
            self._unload()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    _main(args, node_class=ManagedPlannerNode)


if __name__ == "__main__":
    main()
