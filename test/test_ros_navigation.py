"""The navigation command reaches the node even when it is sent once, while the model is still loading
(the node subscribes to ~/input/navigation before it loads the model), and a transient_local
subscription also gets a command latched before the node started."""
from __future__ import annotations


import pytest

from ddrive_ros.bags import topics as T
from ddrive_ros.observation import NAV_COMMANDS
from ddrive_ros.ros import interface as I
from ddrive_ros.ros.domain_id import pid_domain_id
from ddrive_ros.ros.listener import Listener
from ddrive_ros.ros.node_process import NodeProcess

DOMAIN = pid_domain_id(8)  # and slot 9
NODE = {"checkpoint": "random:tiny:fast_ddrive", "decoder": "diffusion", "steps": 2, "num_threads": 1,
        "diagnostics_rate_hz": 5.0, "debug_load_delay_s": 6.0}  # loading a big model: long enough to publish in


def _nav_in_diagnostics(listener: Listener) -> str | None:
    """The newest navigation_command in the node's diagnostics (called under the listener's lock)."""
    for _, st in reversed(listener.diagnostics):
        if "inputs" in st:
            return st["inputs"][2].get("navigation_command")
    return None


def _publisher(listener: Listener, durability: str):
    from std_msgs.msg import String

    from ddrive_ros.ros.node import navigation_qos  # the node's own profile: the publisher matches it

    return listener.node.create_publisher(String, T.TOPIC_NAV, navigation_qos(durability)), String


@pytest.mark.parametrize("durability", ["volatile", "transient_local"])
def test_one_command_sent_during_model_load_is_kept(tmp_path, durability):
    command = "TURN_LEFT" if durability == "volatile" else "CHANGE_LANE_RIGHT"
    assert command in NAV_COMMANDS
    domain = DOMAIN + (0 if durability == "volatile" else 1)
    listener = Listener(domain)
    pub, String = _publisher(listener, durability)
    if durability == "transient_local":
        pub.publish(String(data=command))  # latched before the node exists
    node = NodeProcess({**NODE, "navigation_durability": durability}, domain, tmp_path / "node.log",
                       remaps=I.bag_remaps(False))
    try:
        listener.wait_for(lambda: pub.get_subscription_count() > 0 or not node.alive(), 120,
                          "the node's navigation subscription")
        assert node.alive(), node.tail()
        if durability == "volatile":
            # published once, before the node's outputs exist: the model is still loading
            loading = listener.node.count_publishers(I.resolve(I.OUTPUT_PLAN)) == 0
            pub.publish(String(data=command))
            assert loading and "planner ready" not in node.log_path.read_text(), node.tail()
        got = listener.wait_for(lambda: _nav_in_diagnostics(listener) == command or None, 120,
                                f"navigation_command={command} in the node's diagnostics")
        assert got
    finally:
        listener.close()
        code = node.stop()
    assert code == 0, node.tail()
