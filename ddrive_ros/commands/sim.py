"""`ddrive sim`: the planner drives the synthetic world closed-loop and is scored like NAVSIM (PDMS).

Rows on the same seeded episodes: the expert (ceiling, and the EP reference), constant velocity,
a rule-based IDM planner, and the learned planner with each decoder and with N=4 rollouts. With
--ros the learned rows drive through the real node process over DDS (ddrive_ros/ros/sim_bridge.py).
Thresholds and the protocol: docs/closed_loop.md and ddrive_ros/sim/scorer.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

log = logging.getLogger(__name__)

# method -> (decoder, rollouts, reflect); None: a baseline. --reflect adds "<row>+<mode>" rows.
LEARNED = {
    "ar": ("ar", 1, "off"),
    "diffusion": ("diffusion", 1, "off"),
    "speculative": ("speculative", 1, "off"),
    "s2d2": ("s2d2", 1, "off"),
    "speculative N=4": ("speculative", 4, "off"),
    # privileged headroom: the best of 4 rollouts by the PDM scorer, each driven 4 s in a copy of the world
    "oracle best of N=4": ("speculative", 4, "oracle"),
}
REFLECT_MODES = ("off", "autoedit", "safety", "both")
BASELINES = ("expert", "constant velocity", "idm planner")
DEFAULT_METHODS = ("expert", "constant velocity", "idm planner", "speculative", "speculative N=4")
ALIASES = {"cv": "constant velocity", "idm": "idm planner", "speculative_n4": "speculative N=4",
           "oracle": "oracle best of N=4"}


def register(sub) -> None:
    p = sub.add_parser("sim", help="closed-loop simulation scored like NAVSIM (PDMS), in-process or through the node",
                       description=__doc__)
    p.add_argument("--checkpoint", default=None, help="checkpoint folder or shipped model name (default: fast_ddrive_tiny)")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=777, help="episode seed (777: the project's held-out seed)")
    p.add_argument("--duration", type=float, default=8.0, help="episode seconds: 2 s expert history + the driven rest")
    p.add_argument("--decoder", default=None, help="only this decoder for the learned row (with --rollouts)")
    p.add_argument("--rollouts", type=int, default=1, help="trajectory rollouts of the --decoder row")
    p.add_argument("--methods", default="default",
                   help="comma-separated rows: expert, cv, idm, ar, diffusion, speculative, s2d2, speculative_n4, oracle "
                        "(best of 4 rollouts by the PDM scorer, each driven 4 s in a copy of the world: privileged headroom); "
                        "'default' = expert, cv, idm, speculative, speculative_n4 (20 episodes in minutes on 2 cores); "
                        "'all' = every decoder too")
    p.add_argument("--reflect", default="off",
                   help="comma-separated reflect modes for every learned row: off, autoedit, safety, both; each mode "
                        "but off adds a '<row>+<mode>' row (safety gets the world's true obstacles and lanes)")
    p.add_argument("--plan-hz", type=float, default=5.0, help="planning rate (must divide the 10 Hz camera rate)")
    p.add_argument("--latency-ms", default="auto",
                   help="auto: a plan applies after its measured computing time; a number: fixed latency (deterministic)")
    p.add_argument("--json", default=None, help="write {'rows': [...], 'episodes': [...]} here")
    p.add_argument("--video", default=None, help="folder for MP4s of a few episodes and a PDMS-per-method PNG")
    p.add_argument("--video-episodes", type=int, default=3, help="how many episodes to film (the first ones)")
    p.add_argument("--ros", action="store_true", help="drive the learned rows through the real node (own ROS_DOMAIN_ID)")
    p.add_argument("--domain-id", type=int, default=None, help="with --ros: ROS_DOMAIN_ID of the first node")
    p.add_argument("--num-threads", type=int, default=1,
                   help="torch CPU threads of the in-process planners (1: no spinning pools fighting over shared cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-draft-previous", action="store_true",
                   help="speculative rows draft every plan cold, not from the previous plan (the forwards it saves)")
    p.add_argument("--manoeuvre-resamples", type=int, default=None, metavar="N",
                   help="safety rows: trajectories resampled when the meta names a lane change or turn the plan does "
                        "not make (PlannerOptions.manoeuvre_resamples; default: the planner's, 6; 0 = off)")
    p.add_argument("--safety-perception", choices=("world", "objects", "boxes", "tracked", "ego"), default=None,
                   help="what safety rows check plans against: world = the world's true road users and corridor "
                        "(privileged, as the IDM row; the default in-process), objects = the true road users without "
                        "the corridor (an object list and no map), boxes = the same standing still (what the node gets on "
                        "~/input/obstacles: a MarkerArray has no velocities), tracked = those boxes with velocities estimated "
                        "from one set to the next (reflection/tracking.py; what the node does with them, track_obstacles "
                        "true; with --ros the bridge publishes the boxes and the node tracks them, the default), ego = the "
                        "ego speed only, what the node has without "
                        "~/input/obstacles (kinematic limits and the meta's manoeuvre)")
    p.add_argument("--safety-limits", type=safety_limits_arg, default=None, metavar="NAME=VALUE,...",
                   help="in-process safety rows: thresholds of the check (reflection/safety.Limits fields, e.g. "
                        "min_ttc_s=2,min_clearance_m=0.5; default: Limits()'s)")
    p.add_argument("--safety-repair", choices=("inpaint", "brake"), default=None,
                   help="safety rows (in-process, or the node's safety_repair parameter with --ros): anchor the "
                        "earliest offending waypoint and decode the rest again "
                        "(inpaint), or brake from now along the plan's own path, as gently as the check allows (brake) "
                        "(PlannerOptions.safety_repair; default: the planner's)")
    p.add_argument("--speed-smoothing", type=float, default=None, metavar="WEIGHT",
                   help="jerk penalty of the speed profile along the decoded path (speed_smoothing.py; 0 off; "
                        "default: the planner's)")
    p.add_argument("--follow-meta-speed", choices=("off", "always", "named"), default=None,
                   help="re-time each trajectory to slow at least as its own meta says (DECELERATE / STOP to the "
                        "meta's target speed at 5 s): always, or only when the plan names a reason to slow ahead "
                        "(speed_smoothing.follow_meta_speed; in-process planners; default: the planner's, off)")
    p.add_argument("--start-on-meta", action="store_true",
                   help="pull a standing ego away when its plan's own meta says ACCELERATE and the trajectory stays "
                        "put (speed_smoothing.start_on_meta; in-process planners; default: the planner's, off)")
    p.add_argument("--accel-clip", type=accel_clip, default=None, metavar="LO,HI",
                   help="clamp the acceleration the model reads to [LO, HI] m/s^2 (e.g. -2,1.5: its training range; "
                        "default: the planner's, none)")
    p.add_argument("--logit-bias", type=logit_bias_arg, default=None, metavar="SPEC",
                   help=LOGIT_BIAS_HELP)
    p.add_argument("--tree-rows", type=int, default=1,
                   help="speculative rows: candidate rows per verification (decoding/tree.py; the same plans, fewer forwards)")
    p.add_argument("--tree-depth", type=int, default=1, choices=(1, 2),
                   help="with --tree-rows: 2 branches the candidates at two waypoints (e.g. 64 rows = 8 x 8)")
    p.add_argument("--breakdown", default=None, metavar="SAVED_JSON",
                   help="drive nothing: print a saved run's episodes by situation (scenario kind, navigation command)")
    p.add_argument("--plot", default=None, metavar="PNG", help="with --breakdown: also draw PDMS by scenario kind here")
    p.add_argument("--compare", nargs=2, default=None, metavar=("BASE_JSON", "NEW_JSON"),
                   help="drive nothing: two saved runs of the same episodes, paired episode by episode "
                        "(mean difference and its standard error per sub-score and scenario kind); each side "
                        "may be a comma-separated list of runs on different --seed values, pooled")
    p.add_argument("--compare-method", default="speculative",
                   help="with --compare: the method row to pair; BASE_METHOD=NEW_METHOD pairs two rows (e.g. "
                        "'speculative=speculative+safety', possibly of one JSON given twice)")
    p.set_defaults(func=run)


def reflect_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in REFLECT_MODES]
    if bad or not modes:
        raise ValueError(f"--reflect takes a comma-separated list of {', '.join(REFLECT_MODES)}; got {text!r}")
    return modes


def chosen_methods(methods: str, decoder: str | None, rollouts: int,
                   reflect: str = "off") -> dict[str, tuple[str, int, str] | None]:
    """Row name -> (decoder, rollouts, reflect) for learned rows, None for baselines, in table order."""
    if decoder is not None:
        learned = {decoder if rollouts == 1 else f"{decoder} N={rollouts}": (decoder, rollouts, "off")}
    else:
        learned = dict(LEARNED)
    modes = reflect_modes(reflect)
    everything: dict[str, tuple[str, int] | None] = {**dict.fromkeys(BASELINES), **learned}
    if methods == "all":
        return everything
    if methods == "default":
        methods = ",".join(DEFAULT_METHODS) if decoder is None else ",".join([*BASELINES, *learned])
    wanted = [ALIASES.get(m.strip(), m.strip()) for m in methods.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in everything]
    if unknown:
        raise ValueError(f"unknown --methods {unknown}; known: {', '.join(everything)} (aliases {ALIASES})")
    if "expert" not in wanted:
        wanted.insert(0, "expert")  # every other row's EP is relative to it
    out: dict[str, tuple[str, int, str] | None] = {}
    for m in everything:
        if m not in wanted:
            continue
        spec = everything[m]
        if spec is None:
            out[m] = None
            continue
        if spec[2] == "oracle":
            out[m] = spec
            continue
        for mode in modes:
            out[m if mode == "off" else f"{m}+{mode}"] = (spec[0], spec[1], mode)
    return out


def parse_latency(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError as e:
        raise ValueError(f"--latency-ms must be auto or a number of milliseconds, got {text!r}") from e
    if value < 0:
        raise ValueError(f"--latency-ms must be >= 0, got {value}")
    return value


def smoothing_option(args: argparse.Namespace) -> dict:
    """The planner keyword for --speed-smoothing: none when not given (the planner's default stands)."""
    if args.speed_smoothing is None:
        return {}
    if not args.speed_smoothing >= 0:
        raise ValueError(f"--speed-smoothing must be >= 0, got {args.speed_smoothing}")
    return {"speed_smoothing": float(args.speed_smoothing)}


def safety_limits_arg(text: str) -> dict[str, float]:
    """--safety-limits NAME=VALUE,... -> {name: value}, names checked against reflection/safety.Limits."""
    from dataclasses import fields

    from ddrive_ros.reflection.safety import Limits

    names = {f.name for f in fields(Limits)}
    out: dict[str, float] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in names:
            raise argparse.ArgumentTypeError(f"--safety-limits takes NAME=VALUE with NAME one of {sorted(names)}, got "
                                             f"{item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"--safety-limits {name.strip()}: not a number: {value!r}") from e
    return out


def safety_limits(args: argparse.Namespace):
    """The check's Limits for in-process safety rows: the defaults with --safety-limits applied."""
    from ddrive_ros.reflection.safety import Limits

    return Limits(**(getattr(args, "safety_limits", None) or {}))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM as a normal exit, so the `finally` that stops the node processes runs (they would outlive the run)."""
    sys.exit(128 + signum)


def safety_perception(args: argparse.Namespace) -> str:
    """--safety-perception resolved: world in-process; over ROS boxes (the bridge publishes the road users on the
    node's ~/input/obstacles) or ego (it publishes none)."""
    chosen = getattr(args, "safety_perception", None)
    if getattr(args, "ros", False):
        if chosen in ("world", "objects"):
            raise ValueError(f"--safety-perception {chosen} cannot reach the node: its ~/input/obstacles is a "
                             "MarkerArray (boxes, no velocities) and it has no map; use boxes or ego with --ros, or "
                             "drive it in-process")
        return chosen or "tracked"
    return chosen or "world"


def manoeuvre_option(args: argparse.Namespace) -> dict:
    """The planner keyword for --manoeuvre-resamples: none when not given (the planner's default stands)."""
    if args.manoeuvre_resamples is None:
        return {}
    if args.manoeuvre_resamples < 0:
        raise ValueError(f"--manoeuvre-resamples must be >= 0, got {args.manoeuvre_resamples}")
    return {"manoeuvre_resamples": int(args.manoeuvre_resamples)}


def accel_clip(text: str) -> tuple[float, float]:
    """--accel-clip LO,HI -> (lo, hi), lo < hi."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--accel-clip takes LO,HI in m/s^2 (e.g. -2,1.5), got {text!r}") from e
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"--accel-clip needs LO < HI, got {text!r}")
    return lo, hi


LOGIT_BIAS_HELP = ("decode-time offsets to enum values' log-odds, 'field.VALUE=offset,...' (e.g. "
                   "lateral.LEFT_TURN=2,lateral.RIGHT_TURN=2; decoding/logit_bias.py), or 'none'; default: the "
                   "checkpoint's fitted calibration, if any")


def logit_bias_arg(text: str) -> dict:
    """--logit-bias SPEC -> {field: {value: offset}} ('none' -> {}: no offsets, not even the checkpoint's)."""
    from ddrive_ros.decoding.logit_bias import parse

    try:
        return parse(text, "--logit-bias")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def node_logit_bias(args: argparse.Namespace) -> str:
    """--logit-bias as the node's logit_bias parameter: 'checkpoint' when not given, 'none' for {}."""
    from ddrive_ros.decoding.logit_bias import to_strings

    bias = getattr(args, "logit_bias", None)
    if bias is None:
        return "checkpoint"
    return ",".join(to_strings(bias)) or "none"


def logit_bias_option(args: argparse.Namespace) -> dict:
    """The planner keyword for --logit-bias: none when not given (the checkpoint's calibration stands)."""
    bias = getattr(args, "logit_bias", None)
    return {} if bias is None else {"logit_bias": bias}


def accel_clip_option(args: argparse.Namespace) -> dict:
    """The planner keyword for --accel-clip: none when not given (the planner's default stands)."""
    clip = getattr(args, "accel_clip", None)
    return {} if clip is None else {"accel_clip": clip}


def warm_up(planner) -> None:
    """One plan on a blank observation: the first call allocates caches and is many times slower
    than the rest, which in measured-latency mode would hand the first episode a multi-second lag."""
    import numpy as np

    from ddrive_ros.observation import CAMERAS, Observation

    h, w = planner.config.vision.image_size
    t = time.perf_counter()
    planner.plan(Observation(images=np.zeros((2, len(CAMERAS), h, w, 3), np.uint8), speed=0.0, accel=0.0,
                             yaw_rate=0.0, past_xy=np.zeros((4, 2))))
    planner.restart_sampling()
    log.info("warm-up plan (%s) took %.0f ms", planner.options.decoder, (time.perf_counter() - t) * 1e3)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return print_comparison(args.compare, args.compare_method, args.json)
    if args.breakdown:
        return print_breakdown(Path(args.breakdown), args.plot)
    if args.plot:
        raise SystemExit("--plot draws a saved run (--breakdown); a run with --video draws pdms_by_situation.png itself")
    from ddrive_ros.sim.breakdown import breakdown, markdown as situation_markdown
    from ddrive_ros.sim.closed_loop_run import LoopOptions, markdown, run_methods
    from ddrive_ros.sim.drivers import BestOfNDriver, ConstantVelocityDriver, IdmPlannerDriver, ModelDriver
    from ddrive_ros.sim.sample import default_renderer, episode_seeds

    methods = chosen_methods(args.methods, args.decoder, args.rollouts, args.reflect)
    opts = LoopOptions(duration_s=args.duration, plan_hz=args.plan_hz, latency_ms=parse_latency(args.latency_ms))
    opts.plan_every()  # validates plan_hz before anything loads
    opts.renderer = default_renderer()
    factories: dict = {"expert": None}
    if "constant velocity" in methods:
        factories["constant velocity"] = lambda w: ConstantVelocityDriver()
    if "idm planner" in methods:
        factories["idm planner"] = lambda w: IdmPlannerDriver(w)
    bridges: dict = {}  # method -> NodeBridge
    learned = {m: spec for m, spec in methods.items() if spec is not None}
    # a killed run still stops its node processes (restored when the run ends); the `finally` below stops them
    # whatever ends the run: a node that failed to start, a refused option, an error while driving
    previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm) if args.ros else None
    try:
        if learned:
            from ddrive_ros import checkpoint as ckpt
            from ddrive_ros.planner import Planner, PlannerOptions

            bundle = None if args.ros else ckpt.load(args.checkpoint)
            if not args.ros and args.num_threads > 0:
                import torch

                torch.set_num_threads(args.num_threads)
            # node logs beside the JSON (or in a fresh temporary folder), named in the bridge's log line
            node_log_dir = Path(args.json).parent if args.json else Path(tempfile.mkdtemp(prefix="ddrive_sim_"))
            node_log_prefix = f"{Path(args.json).stem}." if args.json else ""  # runs sharing a folder keep their own logs
            seen = safety_perception(args)  # refuses --safety-perception world|objects with --ros before anything starts
            for i, (name, (decoder, n, reflect)) in enumerate(learned.items()):
                if args.ros and args.speed_smoothing is not None:
                    raise ValueError("--speed-smoothing applies to in-process planners; the node takes its speed_smoothing parameter")
                if args.ros and args.follow_meta_speed is not None:
                    raise ValueError("--follow-meta-speed applies to in-process planners; the node takes its follow_meta_speed parameter")
                if args.ros and args.start_on_meta:
                    raise ValueError("--start-on-meta applies to in-process planners; the node takes its start_on_meta parameter")
                if args.ros and args.accel_clip is not None:
                    raise ValueError("--accel-clip applies to in-process planners; the node has no such parameter")
                if args.ros and args.no_draft_previous:
                    raise ValueError("--no-draft-previous applies to in-process planners; the node takes its draft_previous parameter")
                if args.ros and args.safety_limits:
                    raise ValueError("--safety-limits applies to in-process planners; the node checks with the default "
                                     "limits")
                if args.ros and args.manoeuvre_resamples is not None:
                    raise ValueError("--manoeuvre-resamples applies to in-process planners; the node takes its "
                                     "manoeuvre_resamples parameter")
                if args.ros and reflect == "oracle":
                    raise ValueError("the oracle row needs the world's true road users: drive it in-process")
                if args.ros:
                    from ddrive_ros.ros.sim_bridge import NodeBridge, NodeBridgeOptions

                    bridge = NodeBridge(NodeBridgeOptions(
                        checkpoint=args.checkpoint or "fast_ddrive_tiny", decoder=decoder, rollouts=n, reflect=reflect,
                        tree_rows=args.tree_rows if decoder == "speculative" else 1,
                        tree_depth=args.tree_depth, logit_bias=node_logit_bias(args),
                        track_obstacles=seen == "tracked", safety_repair=args.safety_repair,
                        domain_id=None if args.domain_id is None else args.domain_id + i,
                        log_path=node_log_dir / f"{node_log_prefix}node_{i}_{decoder}_n{n}.log"))
                    bridges[name] = bridge
                    if seen in ("boxes", "tracked"):  # the road users on the node's ~/input/obstacles
                        from ddrive_ros.sim.safety_context import ego_boxes

                        factories[name] = (lambda b: (lambda w: b.bind(partial(ego_boxes, w))))(bridge)
                    else:
                        factories[name] = (lambda b: (lambda w: b.bind(None)))(bridge)
                else:
                    oracle = reflect == "oracle"
                    knobs = ({"tree": args.tree_rows, "tree_depth": args.tree_depth}
                             if decoder == "speculative" and args.tree_rows != 1 else {})
                    planner = Planner(bundle, PlannerOptions(decoder=decoder, rollouts=n, knobs=knobs,
                                                             reflect="off" if oracle else reflect,
                                                             draft_previous=not args.no_draft_previous,
                                                             follow_meta_speed=args.follow_meta_speed or "off",
                                                             start_on_meta=bool(args.start_on_meta),
                                                         **({"safety_repair": args.safety_repair}
                                                            if args.safety_repair else {}),
                                                             **smoothing_option(args), **accel_clip_option(args),
                                                             **manoeuvre_option(args), **logit_bias_option(args)))
                    warm_up(planner)
                    context_of = None  # the planner then checks against the ego speed only
                    if reflect in ("safety", "both") and seen == "tracked":
                        from ddrive_ros.sim.safety_context import TrackedBoxes

                        context_of = TrackedBoxes(safety_limits(args))
                    elif reflect in ("safety", "both") and seen in ("world", "objects", "boxes"):
                        from ddrive_ros.sim.safety_context import safety_context

                        context_of = partial(safety_context, corridor=seen == "world", velocities=seen != "boxes",
                                             limits=safety_limits(args))
                    driver_class = BestOfNDriver if oracle else ModelDriver
                    driver = driver_class(planner, planner.restart_sampling, context_of)
                    factories[name] = (lambda d: (lambda w: d.bind(w)))(driver)

        seeds = episode_seeds(args.seed, args.episodes)
        video_dir = Path(args.video) if args.video else None
        film = set(seeds[: args.video_episodes]) if video_dir else set()
        main = next((m for m in ("speculative N=4", *learned, "idm planner") if m in factories), None)
        experts: dict[int, object] = {}
        videos: list[str] = []

        done: list = []

        def on_episode(r) -> None:
            done.append(r)
            if r.method == "expert":
                experts[r.seed] = r
            if video_dir is not None and r.seed in film and r.method == main:
                from ddrive_ros.sim.sim_video import write_episode_video

                videos.append(str(write_episode_video(video_dir, r, opts.renderer, experts.get(r.seed))))
            r.world.clear_cache()  # rendered frames are not needed past here: keeps memory flat over long runs
            if args.json and r.method == list(factories)[-1]:  # an episode is complete: a long run reports early
                write_json(args, partial_rows(done), done, {"partial": True, "episodes_done": len(experts)})

        t0 = time.perf_counter()
        results = run_methods(factories, seeds, opts, on_episode, progress=not args.no_progress)
    finally:
        for b in bridges.values():
            b.close()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    wall = time.perf_counter() - t0
    rows = [r.row() for r in results]
    print(markdown(rows))
    situations = breakdown(episode_records([x for r in results for x in r.runs]))
    print("\nBy situation (PDMS, then episodes with: PDMS 0 / an at-fault collision / off the drivable area / "
          "a stop-sign violation / a red-light violation):\n")
    print(situation_markdown(situations))
    sim_s = sum(x.sim_s for r in results for x in r.runs)
    world_s = sum(x.world_s for r in results for x in r.runs)
    planner_s = sum(x.planner_s for r in results for x in r.runs)
    print(f"\n{len(seeds)} episodes x {len(results)} methods in {wall:.0f} s wall: {sim_s:.0f} simulated s; "
          f"per simulated second: world {world_s / max(sim_s, 1e-9):.3f} s, planner {planner_s / max(sim_s, 1e-9):.3f} s")
    for r in rows:
        print(f"  {r['method']:<18} world {r['world_s_per_sim_s']:.3f} s/sim-s   planner {r['planner_s_per_sim_s']:.3f} s/sim-s")
    if video_dir is not None:
        from ddrive_ros.sim.breakdown import write_png as write_situations
        from ddrive_ros.sim.sim_video import write_summary

        videos.append(str(write_summary(video_dir, rows)))
        videos.append(str(write_situations(situations, video_dir / "pdms_by_situation.png")))
        print("pictures: " + ", ".join(videos))
    box_ages = {name: dict(b.obstacle_plans) for name, b in bridges.items() if sum(b.obstacle_plans.values())}
    resent = {name: b.resends for name, b in bridges.items()}
    for name, counts in box_ages.items():
        print(f"  {name:<18} node plans checked against this frame's boxes {counts['same_frame']}, an older set "
              f"{counts['older']}, none {counts['none']}")
    if args.json:
        write_json(args, rows, [x for r in results for x in r.runs],
                   {"partial": False, "wall_s": round(wall, 1), "sim_s": sim_s, "world_s": world_s, "planner_s": planner_s,
                    **({"node_obstacle_plans": box_ages} if box_ages else {}),
                    **({"node_frames_resent": resent} if resent else {})})
    return 0


def partial_rows(runs: list) -> list[dict]:
    from ddrive_ros.sim.closed_loop_run import MethodResult

    by: dict[str, list] = {}
    for r in runs:
        by.setdefault(r.method, []).append(r)
    return [MethodResult(m, rs).row() for m, rs in by.items()]


def print_breakdown(path: Path, plot: str | None = None) -> int:
    from ddrive_ros.sim.breakdown import breakdown, markdown as situation_markdown, with_situation, write_png

    try:
        doc = json.loads(path.read_text())
        episodes = doc["episodes"]
        duration = float(doc.get("config", {}).get("duration_s", 8.0))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a saved `ddrive sim --json` run ({e})") from e
    rows = breakdown(with_situation(episodes, duration))
    print(situation_markdown(rows))
    if plot:
        print(f"picture: {write_png(rows, plot)}")
    return 0


def print_comparison(paths: list[str], method: str, json_out: str | None) -> int:
    from ddrive_ros.sim.compare import compare, load_runs, markdown as comparison_markdown, method_pair, methods_in

    sides = [[Path(x) for x in side.split(",") if x] for side in paths]
    if not all(sides):
        raise SystemExit(f"--compare needs at least one saved run on each side, got {paths}")
    try:
        base_method, new_method = method_pair(method, methods_in(sides[0][0]), methods_in(sides[1][0]))
        result = compare(load_runs(sides[0], base_method), load_runs(sides[1], new_method))
    except ValueError as e:
        raise SystemExit(str(e)) from e
    names = [side[0].stem + (f" (+{len(side) - 1} runs)" if len(side) > 1 else "") for side in sides]
    if base_method != new_method:
        names = [f"{n} {m}" for n, m in zip(names, (base_method, new_method))]
    print(comparison_markdown(result, *names))
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps({"base": paths[0], "new": paths[1], "method": method, **result}, indent=1))
    return 0


def episode_records(runs: list) -> list[dict]:
    """Per-episode JSON entries: method, seed, the scenario's kind and command, and the scores."""
    from ddrive_ros.sim.breakdown import situation

    return [{"method": r.method, "seed": r.seed, **situation(r.world.scenario), **r.score.to_dict()} for r in runs]


def write_json(args: argparse.Namespace, rows: list[dict], runs: list, extra: dict) -> None:
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.sim.breakdown import breakdown
    from ddrive_ros.timeline import ACCEL_WINDOW_S

    doc = {"rows": rows,
           "config": {"checkpoint": args.checkpoint or "fast_ddrive_tiny", "episodes": args.episodes, "seed": args.seed,
                      "duration_s": args.duration, "plan_hz": args.plan_hz, "latency_ms": args.latency_ms,
                      "ros": bool(args.ros), "num_threads": args.num_threads,
                      "speed_smoothing": getattr(args, "speed_smoothing", None),
                      "follow_meta_speed": getattr(args, "follow_meta_speed", None) or "off",
                      "start_on_meta": bool(getattr(args, "start_on_meta", False)),
                      "accel_clip": getattr(args, "accel_clip", None), "accel_window_s": ACCEL_WINDOW_S,
                      "manoeuvre_resamples": getattr(args, "manoeuvre_resamples", None),
                      "safety_perception": safety_perception(args),
                      "safety_limits": getattr(args, "safety_limits", None) or {},
                      # every threshold the in-process check used, defaults included: a run says what it was judged by
                      # after a default changes (road_user_horizon_s came in round 21)
                      "safety_limits_used": dataclasses.asdict(safety_limits(args)),
                      "safety_repair": getattr(args, "safety_repair", None) or PlannerOptions.safety_repair,
                      "logit_bias": getattr(args, "logit_bias", None), **extra},
           "episodes": episode_records(runs)}
    doc["by_situation"] = breakdown(doc["episodes"])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1))
