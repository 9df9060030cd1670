"""Planner health from plain timestamps (no rclpy): plan age, worker heartbeat, counters over a window.

The node asks `PlanWatchdog.verdict(now)` once per tick. A planner is unhealthy when the worker
has been inside one plan for more than `timeout_s` (hung), or when it is idle, inputs are fresh and
no plan has been published for `timeout_s` (failing: plan errors, observations that cannot be
built). `timeout_s` must exceed the planning period plus one plan's time. Both mean: send the
fallback and report ERROR; the first real plan afterwards clears it. Counters over a window let a
WARN return to OK once the errors stop.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class WindowCount:
    """How much a monotonically growing total (starting at 0) rose over the last `window_s` seconds."""

    def __init__(self, window_s: float):
        self.window_s = float(window_s)
        self._samples: deque[tuple[float, int]] = deque()  # (time, total), oldest first

    def update(self, now: float, total: int) -> int:
        self._samples.append((now, int(total)))
        # keep one sample at or before the window's start: the base the rise is measured from
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()
        t0, base = self._samples[0]
        return int(total) - (base if t0 <= now - self.window_s else 0)


@dataclass
class Verdict:
    healthy: bool
    reason: str = ""  # hung | failing | "" (healthy)
    detail: str = ""


class PlanWatchdog:
    """Times are monotonic seconds (the worker's compute is wall time, whatever the node clock)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = float(timeout_s)
        self.last_plan: float | None = None  # when the last real plan was published
        self.fresh_since: float | None = None  # since when inputs have been fresh without interruption
        self.busy_since: float | None = None  # when the worker took its current observation
        self.last_failure = ""

    def inputs_fresh(self, now: float, fresh: bool) -> None:
        if not fresh:
            self.fresh_since = None
        elif self.fresh_since is None:
            self.fresh_since = now

    def started(self, now: float) -> None:
        self.busy_since = now

    def finished(self, now: float, published: bool, failure: str = "") -> None:
        self.busy_since = None
        if published:
            self.last_plan = now
            self.last_failure = ""
        elif failure:
            self.last_failure = failure

    def failed(self, reason: str) -> None:
        self.last_failure = reason

    def verdict(self, now: float) -> Verdict:
        if self.busy_since is not None:  # inside a plan: only its own duration counts
            if now - self.busy_since > self.timeout_s:
                return Verdict(False, "hung", f"worker inside one plan for {now - self.busy_since:.2f} s "
                                              f"(> plan_timeout_s {self.timeout_s:g})")
            return Verdict(True)
        if self.fresh_since is None:
            return Verdict(True)
        since = max(self.fresh_since, self.last_plan if self.last_plan is not None else self.fresh_since)
        if now - since > self.timeout_s:
            why = f" (last failure: {self.last_failure})" if self.last_failure else ""
            return Verdict(False, "failing", f"no plan for {now - since:.2f} s with fresh inputs{why}")
        return Verdict(True)
