"""The "model" layer of the node: builds the Planner from ROS parameter values (no rclpy here).

`checkpoint` is a folder, a shipped model name under models/ (default `fast_ddrive_tiny`), or
`random:<config>:<schema>` (e.g. `random:tiny:fast_ddrive`) for a model with random weights,
which tests and the demo use when no trained model is installed.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ddrive_ros.planner import Planner, PlannerOptions

RANDOM_PREFIX = "random:"
DEFAULT_CHECKPOINT = "fast_ddrive_tiny"


def decoder_knobs(decoder: str, tau: float, steps: int, tree_rows: int = 1, tree_depth: int = 1) -> dict[str, Any]:
    """The subset of (tau, steps, tree rows) the decoder takes (ar takes none, speculative the tree)."""
    from ddrive_ros.decoding.strategies import make_strategy

    strategy = make_strategy(decoder)
    fields = {f.name for f in dataclasses.fields(strategy)} if dataclasses.is_dataclass(strategy) else set()
    knobs: dict[str, Any] = {}
    if "tau" in fields:
        knobs["tau"] = float(tau)
    if "steps" in fields and int(steps) > 0:
        knobs["steps"] = int(steps)
    if int(tree_rows) != 1:
        if "tree" not in fields:
            raise ValueError(f"tree_rows={tree_rows}: only decoder speculative verifies candidate rows, not {decoder}")
        knobs["tree"] = int(tree_rows)
        if int(tree_depth) != 1:
            knobs["tree_depth"] = int(tree_depth)
    return knobs


def shipped_available(name: str = DEFAULT_CHECKPOINT) -> bool:
    from ddrive_ros import checkpoint as ckpt

    try:
        ckpt.resolve(name)
        return True
    except ckpt.CheckpointError:
        return False


_DEFAULT = PlannerOptions()


def backend_options_for(backend: str, num_threads: int = 0, int8: bool = False, compile: bool = False) -> dict[str, Any]:
    """The node's parameters as the runtime factory's backend options; a switch the backend does
    not have is refused, naming the parameter."""
    if int8 and backend != "onnx":
        raise ValueError(f"int8 needs backend onnx (ONNX Runtime's dynamic quantisation), got backend {backend!r}")
    if compile and backend != "torch":
        raise ValueError(f"compile needs backend torch (torch.compile), got backend {backend!r}")
    options: dict[str, Any] = {}
    if backend == "onnx":
        if num_threads > 0:
            options["threads"] = int(num_threads)
        if int8:
            options["int8"] = True
    if compile:
        options["compile"] = True
    return options


def load_planner(checkpoint: str, backend: str = _DEFAULT.backend, decoder: str = _DEFAULT.decoder, tau: float = 0.9,
                 steps: int = 0, rollouts: int = _DEFAULT.rollouts,
                 rollout_temperature: float = _DEFAULT.rollout_temperature, device: str = _DEFAULT.device,
                 seed: int = _DEFAULT.seed, num_threads: int = 0, int8: bool = False,
                 compile: bool = False, draft_previous: bool = _DEFAULT.draft_previous,
                 tree_rows: int = 1, tree_depth: int = 1,
                 logit_bias: str = "checkpoint") -> tuple[Planner, dict[str, Any]]:
    """`num_threads` > 0 pins ONNX Runtime's intra-op threads too (without spinning): by default ORT
    takes every core and spins between runs, starving the node's executor thread on a small CPU.
    `int8`: dynamically quantised graphs (backend onnx); `compile`: torch.compile the block step
    (backend torch); `draft_previous`: the previous plan as the speculative draft (planner_options);
    `tree_rows`: candidate rows per speculative verification (decoding/tree.py)."""
    from ddrive_ros import checkpoint as ckpt

    backend_options = backend_options_for(backend, num_threads, int8, compile)
    opts = PlannerOptions(backend=backend, decoder=decoder, knobs=decoder_knobs(decoder, tau, steps, tree_rows, tree_depth),
                          rollouts=max(1, int(rollouts)), rollout_temperature=float(rollout_temperature),
                          device=device, seed=int(seed), backend_options=backend_options,
                          draft_previous=bool(draft_previous), logit_bias=logit_bias_option(logit_bias))
    if checkpoint.startswith(RANDOM_PREFIX):
        parts = checkpoint[len(RANDOM_PREFIX):].split(":")
        config = parts[0] or "tiny"
        schema = parts[1] if len(parts) > 1 and parts[1] else "fast_ddrive"
        bundle = ckpt.build_random(config, schema, seed=int(seed))
        info = {"checkpoint": checkpoint, "random_weights": True, "schema": schema}
    else:
        bundle = ckpt.load(checkpoint or None, device=device)
        info = {"checkpoint": str(bundle.path or checkpoint), "random_weights": bool(bundle.meta.get("random_weights")),
                "schema": bundle.schema.name}
    planner = Planner(bundle, opts)
    info.update(backend=backend, decoder=decoder, knobs=opts.knobs, rollouts=opts.rollouts,
                draft_previous=opts.draft_previous, logit_bias=planner.logit_bias, **backend_options)
    return planner, info


def logit_bias_option(text: str) -> dict[str, dict[str, float]] | None:
    """The node's logit_bias parameter as PlannerOptions.logit_bias: 'checkpoint' -> None (the checkpoint's
    calibration), 'none' -> {}, else the parsed spec (ValueError naming the parameter)."""
    from ddrive_ros.decoding.logit_bias import parse

    if text.strip().lower() == "checkpoint":
        return None
    return parse(text, "parameter logit_bias")
