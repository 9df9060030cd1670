"""ROS_DOMAIN_ID: Fast DDS ends a process whose domain is above 232 with exit status 1 and no Python traceback (a
test run that just stops), so every pid-derived id stays in range and every id handed to a node, a listener or a
child process is checked first, with an error that names it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ddrive_ros.ros.domain_id import MAX_DOMAIN_ID, SLOTS, check_domain_id, domain_id_from_env, pid_domain_id
from ddrive_ros.ros.node_process import NodeProcess
from ddrive_ros.ros.spun_node import SpunNode


def test_fast_dds_ends_the_process_above_domain_232():
    code = ("import rclpy; c = rclpy.Context(); rclpy.init(context=c, domain_id={d}); "
            "n = rclpy.create_node('probe', context=c); print('alive', flush=True)")
    ok = subprocess.run([sys.executable, "-c", code.format(d=MAX_DOMAIN_ID)], capture_output=True, text=True, timeout=60)
    bad = subprocess.run([sys.executable, "-c", code.format(d=MAX_DOMAIN_ID + 1)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "alive" in ok.stdout, ok.stderr
    assert bad.returncode == 1 and "alive" not in bad.stdout and "Traceback" not in bad.stderr


def test_pid_derived_ids_stay_in_range_and_slots_differ():
    ids = {pid_domain_id(slot, pid) for pid in range(5000) for slot in range(SLOTS)}
    assert min(ids) >= 1 and max(ids) <= MAX_DOMAIN_ID
    for pid in (0, 13, 4242, 2**22 - 1):
        assert len({pid_domain_id(slot, pid) for slot in range(SLOTS)}) == SLOTS
    # neighbouring pids (two test runs started together) get disjoint ids
    assert not {pid_domain_id(s, 4242) for s in range(SLOTS)} & {pid_domain_id(s, 4243) for s in range(SLOTS)}
    for bad in (-1, SLOTS, 1.5, True):
        with pytest.raises(ValueError, match="slot"):
            pid_domain_id(bad)


def test_bad_ids_are_refused_with_their_name(monkeypatch, tmp_path):
    assert check_domain_id(0) == 0 and check_domain_id(MAX_DOMAIN_ID) == MAX_DOMAIN_ID and check_domain_id(" 7") == 7
    for bad in (-1, MAX_DOMAIN_ID + 1, True, 3.0, "seven", None):
        with pytest.raises(ValueError, match="my_domain must be an integer in 0 ... 232"):
            check_domain_id(bad, "my_domain")
    monkeypatch.setenv("ROS_DOMAIN_ID", "240")
    with pytest.raises(ValueError, match="ROS_DOMAIN_ID in the environment"):
        domain_id_from_env()
    monkeypatch.setenv("ROS_DOMAIN_ID", "12")
    assert domain_id_from_env() == 12
    monkeypatch.delenv("ROS_DOMAIN_ID")
    assert domain_id_from_env() == pid_domain_id(0)
    # refused before any process or DDS participant exists
    with pytest.raises(ValueError, match="node domain_id"):
        NodeProcess({}, MAX_DOMAIN_ID + 1, tmp_path / "node.log")
    assert not (tmp_path / "node.log").exists()
    with pytest.raises(ValueError, match="probe domain_id"):
        SpunNode("probe", MAX_DOMAIN_ID + 1)
