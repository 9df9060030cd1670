"""The planner node's parameters: one table of defaults, descriptions, ranges and whether a change
needs a restart, and the checks the node's on-set callback applies.

- `read_only` parameters shape what is loaded or subscribed (model, backend, camera type, buffer
  sizes): changing them needs a restart, so ROS refuses a set with "read-only".
- The rest take effect at run time (timer rates, tolerances, decoder knobs, fallback); the node's
  on-set callback refuses a value outside its range or choices with a reason naming the parameter.
- Doubles accept integers (`-p planning_rate_hz:=10`): they are declared with dynamic typing and
  converted to float before the checks, so the stored type is always double.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType
from rclpy.parameter import Parameter

from ddrive_ros.planner_options import PlannerOptions
from ddrive_ros.reflection.safety import Limits
from ddrive_ros.ros.model import DEFAULT_CHECKPOINT

P = ParameterType
_OPT = PlannerOptions()


@dataclass(frozen=True)
class Spec:
    default: Any
    type: int
    description: str
    read_only: bool = False
    range: tuple[float, float] | None = None  # inclusive
    choices: tuple[str, ...] | None = None


PARAMETERS: dict[str, Spec] = {
    # ---- model (loaded once: read-only)
    "checkpoint": Spec(DEFAULT_CHECKPOINT, P.PARAMETER_STRING,
                       "checkpoint folder, shipped model name under share/ddrive_ros/models, or random:<config>:<schema>",
                       read_only=True),
    "backend": Spec(_OPT.backend, P.PARAMETER_STRING, "runtime backend", read_only=True,
                    choices=("torch", "cuda_graph", "onnx", "tensorrt")),
    "decoder": Spec(_OPT.decoder, P.PARAMETER_STRING, "decoder", read_only=True,
                    choices=("ar", "diffusion", "speculative", "s2d2")),
    "rollouts": Spec(_OPT.rollouts, P.PARAMETER_INTEGER, "trajectory rollouts sharing the prefix cache (averaged)",
                     read_only=True, range=(1, 32)),
    "rollout_temperature": Spec(_OPT.rollout_temperature, P.PARAMETER_DOUBLE, "sampling temperature of rollouts 2..N",
                                read_only=True, range=(0.0, 10.0)),
    "seed": Spec(_OPT.seed, P.PARAMETER_INTEGER, "sampling seed (and random-weight seed)", read_only=True,
                 range=(0, 2 ** 31 - 1)),
    "device": Spec(_OPT.device, P.PARAMETER_STRING, "torch device, e.g. cpu or cuda:0", read_only=True),
    "num_threads": Spec(0, P.PARAMETER_INTEGER, "CPU threads of torch and ONNX Runtime (no spinning); 0 = their defaults", read_only=True,
                        range=(0, 256)),
    "int8": Spec(False, P.PARAMETER_BOOL, "backend onnx: run dynamically quantised (int8-weight) graphs; "
                 "quantised on first use next to the exported ones", read_only=True),
    "compile": Spec(False, P.PARAMETER_BOOL, "backend torch: torch.compile the block step (slow first plans)",
                    read_only=True),
    "draft_previous": Spec(_OPT.draft_previous, P.PARAMETER_BOOL,
                           "decoder speculative: draft each block from the previous plan carried forward to the new "
                           "stamp (the same plan, fewer forwards on a stream)", read_only=True),
    "tree_rows": Spec(1, P.PARAMETER_INTEGER,
                      "decoder speculative: candidate rows per verification of the trajectory (decoding/tree.py): "
                      "fewer forwards, the same plan; each row costs about one plan's forward on a CPU, little on a GPU",
                      range=(1, 64), read_only=True),
    "tree_depth": Spec(1, P.PARAMETER_INTEGER, "with tree_rows: 2 branches the candidates at two waypoints "
                       "(64 rows = 8 x 8)", range=(1, 2), read_only=True),
    "logit_bias": Spec("checkpoint", P.PARAMETER_STRING,
                       "decode-time offsets to enum values' log-odds: 'checkpoint' (its fitted calibration, "
                       "bench/meta_calibration.py), 'none', or 'field.VALUE=offset,...' (decoding/logit_bias.py)",
                       read_only=True),
    "warmup": Spec(True, P.PARAMETER_BOOL, "run one plan on a blank observation before subscribing", read_only=True),
    # ---- decoder knobs (the next plan uses them)
    "tau": Spec(0.9, P.PARAMETER_DOUBLE, "confidence threshold of the diffusion / s2d2 decoders", range=(0.0, 1.0)),
    "steps": Spec(0, P.PARAMETER_INTEGER, "fixed denoising forwards per block (diffusion); 0 = by threshold",
                  range=(0, 64)),
    # ---- reflection (the next plan uses them)
    "reflect": Spec(_OPT.reflect, P.PARAMETER_STRING,
                    "after the draft: off | autoedit (the model rewrites its own trajectory tokens) | safety (check "
                    "kinematics, meta and ~/input/obstacles; repair by anchors + inpainting) | both",
                    choices=("off", "autoedit", "safety", "both")),
    "autoedit_tau": Spec(_OPT.autoedit_tau, P.PARAMETER_DOUBLE,
                         "AutoEdit rewrites a drafted token less than this times as likely as its prediction",
                         range=(0.0, 1.0)),
    "safety_rounds": Spec(_OPT.safety_rounds, P.PARAMETER_INTEGER, "anchor search + inpainting rounds", range=(1, 10)),
    "manoeuvre_resamples": Spec(_OPT.manoeuvre_resamples, P.PARAMETER_INTEGER,
                             "safety: trajectories sampled when the meta names a lane change or turn the plan does not make; "
                             "0 = never; needs a drivable corridor, which the node has not: skipped there", range=(0, 16)),
    "safety_repair": Spec(_OPT.safety_repair, P.PARAMETER_STRING,
                          "safety: how a plan that meets a road user is mended: inpaint (anchor the first offending "
                          "waypoint, decode the rest again) or brake (slow the whole plan along its own path from now, "
                          "as gently as the check allows; reflection/safety.search_brake)", choices=("inpaint", "brake")),
    "safety_horizon_s": Spec(Limits().road_user_horizon_s, P.PARAMETER_DOUBLE,
                             "safety: road users are judged at the plan's waypoints up to this time (s), TTC reaching "
                             "min_ttc_s past it; predictions further out are guesses the next plan revises (a longer "
                             "look-ahead braked for conflicts that never came; docs/reflection.md, 'A horizon for road "
                             "users'); 5 = the whole plan", range=(0.5, 5.0)),
    "track_obstacles": Spec(True, P.PARAMETER_BOOL,
                            "safety: follow the ~/input/obstacles boxes from set to set for their velocities and move them "
                            "to the plan's time and pose (reflection/tracking.py); false: check them standing where they "
                            "were (a car driving away ahead reads as a wall)"),
    # ---- trajectory shaping (the next plan uses it)
    "speed_smoothing": Spec(_OPT.speed_smoothing, P.PARAMETER_DOUBLE,
                            "jerk penalty of the speed profile re-timed along the decoded path (speed_smoothing.py); "
                            "0 = the plan goes through every decoded waypoint", range=(0.0, 100.0)),
    "follow_meta_speed": Spec(_OPT.follow_meta_speed, P.PARAMETER_STRING,
                              "re-time the trajectory to slow at least as its own meta says (DECELERATE / STOP to the "
                              "meta's target speed at 5 s): off, always, or named (only when the plan names a reason to "
                              "slow ahead); fewer at-fault collisions, less progress (docs/closed_loop.md)",
                              choices=("off", "always", "named")),
    "start_on_meta": Spec(_OPT.start_on_meta, P.PARAMETER_BOOL,
                          "pull a standing ego away when the plan's own meta says ACCELERATE and its trajectory stays "
                          "put (speed_smoothing.start_on_meta; docs/closed_loop.md); with reflect safety, refused "
                          "where it meets a road user the decoded plan did not"),
    # ---- inputs (subscriptions and buffers: read-only)
    "camera_type": Spec("raw", P.PARAMETER_STRING,
                        "raw: subscribe ~/input/camera/<cam>/image (Image); compressed: .../image/compressed",
                        read_only=True, choices=("raw", "compressed")),
    "camera_qos_depth": Spec(2, P.PARAMETER_INTEGER, "queue depth of the best-effort camera subscriptions",
                             read_only=True, range=(1, 100)),
    "camera_buffer_size": Spec(30, P.PARAMETER_INTEGER,
                               "frames kept per camera, at the model's input size (must cover frame_history_s)",
                               read_only=True, range=(2, 1000)),
    "odom_history_s": Spec(3.0, P.PARAMETER_DOUBLE, "odometry kept (must cover the 2 s of past positions)",
                           read_only=True, range=(2.5, 60.0)),
    "navigation_durability": Spec("volatile", P.PARAMETER_STRING,
                                  "QoS durability of ~/input/navigation (subscribed before the model loads, so a "
                                  "command sent during loading is kept); transient_local also receives the last "
                                  "command latched before the node started, but then matches only transient_local "
                                  "publishers", read_only=True, choices=("volatile", "transient_local")),
    # ---- outputs
    "output_frame": Spec("ego", P.PARAMETER_STRING,
                         "ego: outputs in base_link at the input stamp; odom: transformed into the odometry's frame "
                         "with the odometry pose at the input stamp", read_only=True, choices=("ego", "odom")),
    "ego_frame_id": Spec("base_link", P.PARAMETER_STRING, "frame_id of ego-frame outputs", read_only=True),
    # ---- timing (run time)
    "planning_rate_hz": Spec(5.0, P.PARAMETER_DOUBLE, "planning timer rate (up to 1 kHz: with use_sim_time the closed-loop "
                             "bridge runs the timer on every /clock step)", range=(0.1, 1000.0)),
    "diagnostics_rate_hz": Spec(2.0, P.PARAMETER_DOUBLE, "diagnostics publishing rate", range=(0.1, 50.0)),
    "sync_tolerance_s": Spec(0.05, P.PARAMETER_DOUBLE, "max stamp difference between a side camera and the front",
                             range=(0.0, 0.5)),
    "max_input_age_s": Spec(0.5, P.PARAMETER_DOUBLE, "inputs older than this (node clock) are stale: no plan",
                            range=(0.05, 10.0)),
    "frame_history_s": Spec(0.5, P.PARAMETER_DOUBLE, "age of the second (history) frame", range=(0.05, 2.0)),
    "odom_wait_s": Spec(0.03, P.PARAMETER_DOUBLE, "a front frame whose odometry has not reached its stamp waits for "
                        "it until this long after the stamp (node clock); after that the ego state is extrapolated",
                        range=(0.0, 0.5)),
    # ---- watchdogs and fallback (run time)
    "plan_timeout_s": Spec(1.0, P.PARAMETER_DOUBLE,
                           "no plan for this long while inputs are fresh (hung or failing planner): fallback + ERROR",
                           range=(0.05, 60.0)),
    "fallback": Spec("stop", P.PARAMETER_STRING,
                     "on stale inputs or a hung/failing planner: stop (comfortable stop along the last plan) | none",
                     choices=("stop", "none")),
    "fallback_decel": Spec(2.0, P.PARAMETER_DOUBLE, "deceleration of the fallback stop, m/s^2", range=(0.1, 10.0)),
    "fallback_timeout_s": Spec(5.0, P.PARAMETER_DOUBLE,
                               "the fallback stop expires this long after the last plan's stamp: nothing is sent after",
                               range=(0.1, 60.0)),
    "diagnostic_window_s": Spec(10.0, P.PARAMETER_DOUBLE,
                                "errors and drops count towards WARN for this long, then the status returns to OK",
                                range=(1.0, 600.0)),
    "debug_load_delay_s": Spec(0.0, P.PARAMETER_DOUBLE,
                               "TEST ONLY: model loading takes this much longer (a big model on a slow disk)",
                               read_only=True, range=(0.0, 600.0)),
    "debug_plan_delay_s": Spec(0.0, P.PARAMETER_DOUBLE,
                               "TEST ONLY: the worker sleeps this long before each plan (simulates a hung planner)",
                               range=(0.0, 60.0)),
}


def descriptor(name: str, spec: Spec) -> ParameterDescriptor:
    d = ParameterDescriptor(name=name, description=spec.description, read_only=spec.read_only)
    if spec.type == P.PARAMETER_DOUBLE:
        d.dynamic_typing = True  # integers accepted, converted to float (see `as_declared_type`)
    else:
        d.type = spec.type
    if spec.range is not None:
        lo, hi = spec.range
        if spec.type == P.PARAMETER_INTEGER:
            d.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=0)]
        else:
            d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
    if spec.choices:
        d.additional_constraints = "one of: " + ", ".join(spec.choices)
    return d


def as_declared_type(param: Parameter) -> Parameter:
    """An integer given for a double parameter, as a double (other parameters unchanged)."""
    spec = PARAMETERS.get(param.name)
    if spec is not None and spec.type == P.PARAMETER_DOUBLE and param.type_ == Parameter.Type.INTEGER:
        return Parameter(param.name, Parameter.Type.DOUBLE, float(param.value))
    return param


def check(param: Parameter) -> str | None:
    """Why this value is refused (None: accepted). Ranges of doubles are checked here too because a
    dynamically typed parameter skips rclpy's own range check for a value of another type."""
    spec = PARAMETERS.get(param.name)
    if spec is None:
        return None
    expected = Parameter.Type(spec.type)
    if param.type_ != expected:
        return f"{param.name} must be a {expected.name.lower()}, got {param.type_.name.lower()}"
    v = param.value
    if spec.range is not None and not spec.range[0] <= v <= spec.range[1]:
        return f"{param.name}={v} is outside [{spec.range[0]}, {spec.range[1]}]"
    if spec.choices is not None and v not in spec.choices:
        return f"{param.name}={v!r} is not one of {', '.join(spec.choices)}"
    return None
