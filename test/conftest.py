"""Shared fixtures: small random-weight models built once per session."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_script(name: str):
    """bench/<name>.py as a module (the bench scripts are not a package), registered under its name in
    sys.modules so that its dataclasses can look their module up."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def tiny_fast():
    from ddrive_ros.checkpoint import build_random

    return build_random("tiny", "fast_ddrive", seed=0)


@pytest.fixture(scope="session")
def tiny_fast_bins():
    from ddrive_ros.checkpoint import build_random

    return build_random("tiny", "fast_ddrive_bins", seed=2)


@pytest.fixture(scope="session")
def tiny_traj():
    from ddrive_ros.checkpoint import build_random

    return build_random("tiny", "trajectory_only", seed=1)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module: on two shared cores, two runtimes (or a test and a node process)
    with spinning thread pools starve each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@contextlib.contextmanager
def node_with_feed(tmp, domain: int, node_params: dict, **feed_options):
    """A planner node and a sensor feed, each its own process on `domain`, and a Listener here that has
    seen two real plans; yields (listener, node); stops all three and checks the node exits cleanly."""
    from ddrive_ros.ros import interface as I
    from ddrive_ros.ros.listener import Listener, start_feed
    from ddrive_ros.ros.node_process import NodeProcess

    node = NodeProcess(node_params, domain, tmp / "node.log", remaps=I.bag_remaps(False))
    feed = start_feed(domain, tmp / "feed.log", **feed_options)
    listener = Listener(domain)
    try:
        listener.wait_for(lambda: len([p for _, p in listener.plans if not p["fallback"]]) >= 2, 150,
                          "two plans from the node")
        yield listener, node
    finally:
        listener.close()
        feed.terminate()
        feed.wait(10)
        code = node.stop()
        assert code == 0, node.tail()
