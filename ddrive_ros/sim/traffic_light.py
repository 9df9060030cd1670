"""A fixed-time two-phase traffic light: main road and crossing road take turns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

GREEN, YELLOW, RED = "G", "Y", "R"
STATE_NAMES = {GREEN: "green", YELLOW: "yellow", RED: "red"}


@dataclass(frozen=True)
class TrafficLightCycle:
    """Main green -> main yellow -> all red -> cross green -> cross yellow -> all red -> ...

    `offset_s` shifts the cycle so that an episode can start anywhere in it.
    """

    main_green_s: float = 10.0
    cross_green_s: float = 8.0
    yellow_s: float = 3.0
    all_red_s: float = 1.5
    offset_s: float = 0.0

    @property
    def period_s(self) -> float:
        return self.main_green_s + self.cross_green_s + 2 * (self.yellow_s + self.all_red_s)

    def state(self, t: ArrayLike, road: int = 0) -> np.ndarray:
        """'G' / 'Y' / 'R' for the main road (road=0) or the crossing road (road=1) at times t."""
        phase = np.mod(np.asarray(t, dtype=float) + self.offset_s, self.period_s)
        main_y = self.main_green_s
        main_r = main_y + self.yellow_s
        cross_g = main_r + self.all_red_s
        cross_y = cross_g + self.cross_green_s
        cross_r = cross_y + self.yellow_s
        if road == 0:
            return np.where(phase < main_y, GREEN, np.where(phase < main_r, YELLOW, RED))
        return np.where((phase >= cross_g) & (phase < cross_y), GREEN,
                        np.where((phase >= cross_y) & (phase < cross_r), YELLOW, RED))
