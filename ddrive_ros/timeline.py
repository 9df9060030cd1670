"""Every time grid and offset of the package, once: what the planner sees of the past and what it
plans for the future. Seconds, relative to the observation time t0 (the anchor camera's stamp)."""
from __future__ import annotations

import numpy as np

PAST_TIMES = np.array([-2.0, -1.5, -1.0, -0.5])  # past ego positions in the observation, oldest first
PAST_HORIZON_S = 2.0  # odometry needed before t0
FRAME_HISTORY_S = 0.5  # the second camera frame is this much older than t0
# longitudinal acceleration: backward speed difference over this window. Two periods of a go/stop swing at half
# the 5 Hz plan rate (0.4 s): with 0.2 s the planner read its own controller's swing back and fed it (215 swings
# a minute in closed loop, docs/closed_loop.md); the expert's smooth acceleration reads nearly the same either way
ACCEL_WINDOW_S = 0.8
OUTPUT_TIMES = np.round(np.arange(1, 21) * 0.25, 6)  # the plan's 20 output stamps, 0.25 .. 5.0 s
FUTURE_HORIZON_S = float(OUTPUT_TIMES[-1])  # ground truth needed after t0
L2_HORIZONS_S: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0)  # where L2 errors are reported
