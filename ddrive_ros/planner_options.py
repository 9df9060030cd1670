"""How a planner runs: backend, decoder and its knobs, rollouts, sampling. One default for each
option, here; the node's parameters, the CLI flags and the evaluator take theirs from this class.
Importing it loads no torch (the CLI builds its parser from it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PlannerOptions:
    backend: str = "torch"  # torch | cuda_graph | onnx | tensorrt
    decoder: str = "speculative"  # ar | diffusion | speculative | s2d2
    knobs: dict[str, Any] = field(default_factory=dict)  # decoder knobs, e.g. {"tau": 0.9, "steps": 4}
    block_size: int | None = None  # default: the checkpoint's
    rollouts: int = 1
    rollout_temperature: float = 0.3  # N=4 at 0.3 beat greedy on held-out episodes; 1.0 did not
    temperature: float = 0.0
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    backend_options: dict[str, Any] = field(default_factory=dict)
    # reflection after the draft (decoding/reflect.py): off | autoedit | safety | both
    reflect: str = "off"
    autoedit_tau: float = 0.5  # AutoEdit rewrites a drafted token less than this times as likely as its prediction
    safety_rounds: int = 3  # anchor search + inpainting rounds of safety-guided reflection
    # safety-guided reflection: trajectories sampled (temperature 0.6) from the same prefix when the plan's meta names a
    # lane change (not yet under way) or turn its trajectory does not make; a sample is kept where the safety check
    # scores it better. 0: never, and the rule is not checked. Validation seed 31, 60 episodes: one more lane change
    # made, PDMS +0.006 (SE 0.004) against safety without it (docs/reflection.md, "Manoeuvres the meta names")
    manoeuvre_resamples: int = 6
    # safety-guided reflection's repair of a plan that meets a road user: "brake" writes the whole trajectory as the
    # gentlest slow-down along its own path that the check scores better (reflection/safety.search_brake); "inpaint"
    # anchors the earliest offending waypoint and decodes the later ones again. With tracked boxes on 360 validation
    # episodes brake scored 0.865 against 0.855 (+0.011, SE 0.010) with no at-fault collision against 12, at a cost in
    # progress and comfort (docs/reflection.md, "Braking from now")
    safety_repair: str = "brake"
    # speculative decoding drafts each block from the previous plan carried forward to the new stamp
    # (ddrive_ros/previous_plan.py): fewer forwards on a stream, the same greedy plan
    draft_previous: bool = True
    # without a previous plan to draft from (a stream's first plan, a gap, an open-loop sample) the trajectory is
    # drafted from the ego state (ddrive_ros/kinematic_draft.py): fewer forwards, the same greedy plan
    draft_kinematic: bool = True
    # jerk penalty of the speed profile re-timed along the decoded path (ddrive_ros/speed_smoothing.py); 0: off,
    # the plan goes through every decoded waypoint exactly. 0.1 lifts both shipped models in closed loop
    # (validation seed 31, acceleration over 0.8 s: fast_ddrive 0.663 -> 0.691, trajectory_only 0.793 -> 0.847)
    speed_smoothing: float = 0.1
    # re-time the trajectory along its path so that it slows at least as its own meta says: when the meta is
    # DECELERATE or STOP, no stamp further along than a constant deceleration from the ego speed to the meta's target
    # speed at 5 s (speed_smoothing.follow_meta_speed). off | always | named (only when the plan also names a road
    # user, light or sign ahead to slow for). Round 15 measured both on validation (docs/closed_loop.md)
    follow_meta_speed: str = "off"
    # pull a standing ego away when the plan's own meta says ACCELERATE and its trajectory stays put: re-timed along
    # its path (extended straight on) to at least a 1 m/s^2 start to the meta's target speed
    # (speed_smoothing.start_on_meta; docs/closed_loop.md, "Pulling away when the meta says go": on 360 validation
    # episodes PDMS -0.005, SE 0.002, so off)
    start_on_meta: bool = False
    # (lo, hi) m/s^2: the measured acceleration the model reads is clamped to this range. Training acceleration
    # lies within about [-2.0, 1.5] (the expert's 1st-99th percentile); a closed-loop controller saturates at
    # +3 / -4..-7, values the model never saw. None: read as measured
    accel_clip: tuple[float, float] | None = None
    # decode-time offsets to enum values' log-odds, {field: {value: offset}} (decoding/logit_bias.py); every decoder
    # reads them alike, so speculative still equals AR. None: the checkpoint's fitted ones (config.yaml
    # `calibration.logit_bias`, bench/meta_calibration.py); {}: none
    logit_bias: dict[str, dict[str, float]] | None = None
