"""ROS_DOMAIN_ID: the range Fast DDS accepts, and pid-derived ids that keep concurrent processes apart.

Fast DDS puts a participant on ports 7400 + 250 x domain + ...; above domain 232 the port overflows and Fast DDS ends
the whole process with exit status 1 after one log line ("Calculated port number is too high"). In a test run that
is a silent stop with no traceback, so every id here is checked before a node, a listener or a child process gets it.
"""
from __future__ import annotations

import os

MAX_DOMAIN_ID = 232
SLOTS = 16  # ids a process may use side by side: pid_domain_id(0) ... pid_domain_id(15)
GROUPS = (MAX_DOMAIN_ID - 1) // SLOTS  # 14 groups of 16: ids 1 ... 224


def check_domain_id(domain_id: object, what: str = "ROS_DOMAIN_ID") -> int:
    """`domain_id` as an int in 0 ... 232, else a ValueError naming `what`."""
    if isinstance(domain_id, str) and domain_id.strip().isdigit():
        domain_id = int(domain_id)
    if isinstance(domain_id, bool) or not isinstance(domain_id, int) or not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise ValueError(f"{what} must be an integer in 0 ... {MAX_DOMAIN_ID} (Fast DDS ends the process above "
                         f"{MAX_DOMAIN_ID}), got {domain_id!r}")
    return domain_id


def pid_domain_id(slot: int = 0, pid: int | None = None) -> int:
    """The `slot`-th (0 ... 15) of the 16 ids this process's pid picks: processes whose pids differ modulo 14 get
    disjoint ids, and one process's nodes on different slots do not hear each other."""
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < SLOTS:
        raise ValueError(f"domain slot must be an integer in 0 ... {SLOTS - 1}, got {slot!r}")
    pid = os.getpid() if pid is None else pid
    return 1 + (pid % GROUPS) * SLOTS + slot


def domain_id_from_env() -> int:
    """ROS_DOMAIN_ID from the environment (checked), else this process's first pid-derived id."""
    text = os.environ.get("ROS_DOMAIN_ID")
    if text is None or not text.strip():
        return pid_domain_id(0)
    return check_domain_id(text, "ROS_DOMAIN_ID in the environment")
