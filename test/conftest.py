"""Shared fixtures: small random-weight models built once per session."""
from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def tiny_fast():
    from ddrive_ros.checkpoint import build_random

    return build_random("tiny", "fast_ddrive", seed=0)


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
