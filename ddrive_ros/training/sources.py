"""Where training samples come from: the synthetic world or a user's rosbags, behind one function."""
from __future__ import annotations

import logging
from typing import Any

from ddrive_ros.bags.reader import extract_samples
from ddrive_ros.sample import Sample
from ddrive_ros.sim.drift import DriftSpec
from ddrive_ros.sim.sample import samples_from_world

log = logging.getLogger(__name__)


DAGGER_REFLECT = ("off", "safety")  # safety: the planner checks its plans against tracked boxes, as the node does


def dagger_planner(checkpoint: str, decoder: str, threads: int, reflect: str = "off"):
    """The planner a `source: dagger` entry drives (module level: a collecting process builds its own)."""
    import torch

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner, PlannerOptions

    torch.set_num_threads(threads)
    return Planner(ckpt.load(checkpoint), PlannerOptions(decoder=decoder, reflect=reflect))


def _commands(data: dict[str, Any], source: str) -> tuple[str, ...] | None:
    """A data entry's `commands` (a list of navigation commands; the names are checked where the episodes are drawn)."""
    commands = data.get("commands")
    if commands is not None and (isinstance(commands, str) or not isinstance(commands, (list, tuple))):
        raise ValueError(f"`commands` of a `source: {source}` data entry must be a list of navigation commands, "
                         f"not {commands!r}")
    return tuple(commands) if commands is not None else None


def dagger_samples(data: dict[str, Any]) -> list[Sample]:
    """`source: dagger`: the checkpoint's planner drives closed-loop episodes and the expert labels the
    states it visits (`sim/dagger.py`). Keys: checkpoint, seed, episodes; optional plan_hz, latency_ms,
    decoder, threads (torch threads of the planner: one, as on a shared CPU more OpenMP threads stall),
    workers (processes driving episodes side by side, each with its own planner: the same samples, sooner),
    reflect (off, or safety: the planner checks and repairs its plans against the road users' boxes tracked as the
    node tracks them, and the expert labels where those repairs take it), commands (a list of navigation commands:
    only those episodes among the `episodes` drawn are driven, as in a world entry), label_meta (true: the expert's
    meta behaviour from each visited state is labelled too, by the world samples' rule; default false, the
    trajectory only)."""
    from ddrive_ros.sim.dagger import collect

    missing = {"checkpoint", "seed", "episodes"} - set(data)
    if missing:
        raise ValueError(f"data source dagger needs {sorted(missing)}")
    unknown = set(data) - {"source", "checkpoint", "seed", "episodes", "plan_hz", "latency_ms", "decoder", "threads",
                           "workers", "reflect", "commands", "label_meta"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in a `source: dagger` data entry (checkpoint, seed, episodes, "
                         "plan_hz, latency_ms, decoder, threads, workers, reflect, commands, label_meta)")
    commands = _commands(data, "dagger")
    label_meta = data.get("label_meta", False)
    if not isinstance(label_meta, bool):
        raise ValueError(f"`label_meta` of a `source: dagger` data entry must be true or false, not {label_meta!r}")
    reflect = data.get("reflect", "off")
    if reflect not in DAGGER_REFLECT:
        raise ValueError(f"`reflect` of a `source: dagger` data entry must be one of {DAGGER_REFLECT}, not {reflect!r}")
    workers = data.get("workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` of a `source: dagger` data entry must be an integer >= 1, not {workers!r}")
    if workers > 1:
        from ddrive_ros.sim.dagger import collect_in_processes

        return collect_in_processes(dagger_planner, (str(data["checkpoint"]), str(data.get("decoder", "speculative")),
                                                     int(data.get("threads", 1)), reflect),
                                    int(data["seed"]), int(data["episodes"]), workers,
                                    plan_hz=float(data.get("plan_hz", 5.0)), latency_ms=float(data.get("latency_ms", 200.0)),
                                    name=str(data["checkpoint"]), commands=commands,
                                    label_meta=label_meta)
    planner = dagger_planner(str(data["checkpoint"]), str(data.get("decoder", "speculative")), int(data.get("threads", 1)),
                             reflect)
    return collect(planner, int(data["seed"]), int(data["episodes"]), plan_hz=float(data.get("plan_hz", 5.0)),
                   latency_ms=float(data.get("latency_ms", 200.0)), name=str(data["checkpoint"]), commands=commands,
                   label_meta=label_meta)


def load_samples(data: dict[str, Any] | list[dict[str, Any]]) -> list[Sample]:
    """Samples from the synthetic world (`source: world`), from bag folders (`source: bags`) or from a
    planner's own closed-loop drives labelled by the expert (`source: dagger`, `sim/dagger.py`): one
    interface, the same `Sample`s, so training never asks where they came from. A list of sources
    is their concatenation."""
    if isinstance(data, list):
        out = []
        for part in data:
            out += load_samples(part)
        return out
    source = data.get("source", "world")
    if source == "world":
        unknown = set(data) - {"source", "seed", "episodes", "duration_s", "stride_s", "drift", "commands"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)} in a `source: world` data entry "
                             f"(source, seed, episodes, duration_s, stride_s, drift, commands)")
        drift = DriftSpec.from_dict(data["drift"]) if "drift" in data else None
        return list(samples_from_world(int(data.get("seed", 0)), int(data.get("episodes", 40)),
                                       duration_s=float(data.get("duration_s", 12.0)), stride_s=float(data.get("stride_s", 0.5)),
                                       drift=drift, commands=_commands(data, "world")))
    if source == "bags":
        out = []
        for bag in data["bags"]:
            samples, report = extract_samples(bag)
            log.info("%s", report.summary())
            out += samples
        return out
    if source == "dagger":
        return dagger_samples(data)
    raise ValueError(f"unknown data source {source!r} (world | bags | dagger)")
