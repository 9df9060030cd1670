"""Topic frequency and timestamp statuses in the manner of diagnostic_updater's FrequencyStatus and
TimeStampStatus (that package is not on pip, and these are a few lines): plain Python, the node
turns each `Status` into a diagnostic_msgs/DiagnosticStatus."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

OK, WARN, ERROR = 0, 1, 2


@dataclass
class Status:
    level: int
    message: str
    values: dict[str, str] = field(default_factory=dict)


class FrequencyStatus:
    """Events per second over a sliding window of `window` status calls, checked against
    [min_hz * (1 - tolerance), max_hz * (1 + tolerance)] (diagnostic_updater's rule)."""

    def __init__(self, min_hz: float, max_hz: float, tolerance: float = 0.1, window: int = 5):
        self.min_hz, self.max_hz, self.tolerance = float(min_hz), float(max_hz), float(tolerance)
        self.count = 0
        self._history: deque[tuple[float, int]] = deque(maxlen=max(2, window))

    def tick(self) -> None:
        self.count += 1

    def status(self, now: float) -> Status:
        self._history.append((now, self.count))
        (t0, c0), (t1, c1) = self._history[0], self._history[-1]
        events, span = c1 - c0, t1 - t0
        values = {"events_in_window": str(events), "window_s": f"{span:.2f}", "events_total": str(self.count),
                  "min_hz": f"{self.min_hz:g}", "max_hz": f"{self.max_hz:g}"}
        if span <= 0:
            return Status(OK, "collecting", values)
        hz = events / span
        values["frequency_hz"] = f"{hz:.2f}"
        if events == 0:
            return Status(ERROR, "no events recently", values)
        if hz < self.min_hz * (1 - self.tolerance):
            return Status(WARN, f"frequency too low ({hz:.2f} Hz)", values)
        if hz > self.max_hz * (1 + self.tolerance):
            return Status(WARN, f"frequency too high ({hz:.2f} Hz)", values)
        return Status(OK, "desired frequency met", values)


class TimeStampStatus:
    """Header stamps against the clock at arrival: delay = now - stamp must lie in
    [min_delay_s, max_delay_s] (a stamp from the future or far in the past is an error)."""

    def __init__(self, min_delay_s: float = -1.0, max_delay_s: float = 5.0):
        self.min_delay_s, self.max_delay_s = float(min_delay_s), float(max_delay_s)
        self._lo: float | None = None
        self._hi: float | None = None
        self.early = self.late = self.count = 0

    def tick(self, stamp: float, now: float) -> None:
        d = now - stamp
        self.count += 1
        self._lo = d if self._lo is None else min(self._lo, d)
        self._hi = d if self._hi is None else max(self._hi, d)
        self.early += d < self.min_delay_s
        self.late += d > self.max_delay_s

    def status(self) -> Status:
        """Since the last call (as diagnostic_updater's): the extreme delays seen, then reset."""
        values = {"stamps": str(self.count), "early_total": str(self.early), "late_total": str(self.late)}
        if self._lo is None:
            return Status(WARN, "no stamps in this period", values)
        lo, hi = self._lo, self._hi
        values.update(min_delay_s=f"{lo:.3f}", max_delay_s=f"{hi:.3f}")
        self._lo = self._hi = None
        if lo < self.min_delay_s:
            return Status(ERROR, f"stamps too far in the future ({-lo:.3f} s)", values)
        if hi > self.max_delay_s:
            return Status(ERROR, f"stamps too old ({hi:.3f} s)", values)
        return Status(OK, "timestamps ok", values)
