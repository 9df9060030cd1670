"""Checkpoint folders: model.safetensors + config.yaml + tokenizer.json + schema.yaml (+ words.txt).

Loading never unpickles: weights come through safetensors, everything else is
YAML/JSON text. A missing or mismatched file is an error that names the file.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file, save_file

from ddrive_ros import share_dir
from ddrive_ros.decoding import logit_bias
from ddrive_ros.model.config import ModelConfig
from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import Schema
from ddrive_ros.scaffold.tokenizer import Tokenizer

log = logging.getLogger(__name__)

WEIGHTS, CONFIG, TOKENIZER, SCHEMA, WORDS = "model.safetensors", "config.yaml", "tokenizer.json", "schema.yaml", "words.txt"
DEFAULT_CHECKPOINT = "fast_ddrive_tiny"


class CheckpointError(ValueError):
    """A checkpoint folder is missing a file or its files do not fit together."""


@dataclass
class Bundle:
    model: DrivingVLA
    tokenizer: Tokenizer
    schema: Schema
    config: ModelConfig
    meta: dict[str, Any]
    path: Path | None = None
    # fitted to these weights after training (config.yaml `calibration:`; e.g. `logit_bias`, decoding/logit_bias.py).
    # `save` does not carry it over: new weights need a new fit (`write_calibration`)
    calibration: dict[str, Any] = field(default_factory=dict)


def build_random(config: str | Path, schema: str | Path, block_size: int | None = None, seed: int = 0,
                 action_after_prompt: bool = False) -> Bundle:
    """A model with random weights for a named config and schema (tests, benchmarks). `action_after_prompt`:
    the trajectory's rotary positions start right after the prompt (ModelConfig.action_rope_shift)."""
    sch = Schema.load(schema)
    tok = Tokenizer.build(sch)
    bs = block_size or sch.default_block_size
    layout = Layout(sch, tok, bs)
    cfg = ModelConfig.load(config).with_output(len(tok), layout.length, bs)
    if action_after_prompt:
        cfg = replace(cfg, action_rope_shift=first_action_position(layout))
    torch.manual_seed(seed)
    model = DrivingVLA(cfg)
    init_ordinal_embeddings(model, tok)
    return Bundle(model, tok, sch, cfg, {"random_weights": True, "seed": seed})


def first_action_position(layout: Layout) -> int:
    """The first trajectory (action) position's offset in the plan template."""
    action = np.flatnonzero(np.asarray(layout.action))
    if not len(action):
        raise ValueError(f"schema {layout.schema.name!r} has no trajectory positions to move")
    return int(action[0])


@torch.no_grad()
def init_ordinal_embeddings(model: DrivingVLA, tok: Tokenizer) -> None:
    """Give bin and digit tokens embeddings that vary smoothly with their value (sinusoids at a few
    wavelengths), so neighbouring values start out similar instead of unrelated."""
    emb = model.backbone.embed.weight
    dim = emb.shape[1]
    scale = emb.std().item()
    for prefix, count in (("<bin_", None), ("", 10)):
        ids, values = [], []
        for t in tok.tokens:
            if prefix and t.startswith(prefix) and t.endswith(">"):
                ids.append(tok.id(t)); values.append(float(t[len(prefix):-1]))  # noqa: E702
            elif not prefix and len(t) == 1 and t.isdigit():
                ids.append(tok.id(t)); values.append(float(t))  # noqa: E702
        if not ids:
            continue
        v = torch.tensor(values)[:, None] / max(max(values), 1.0)
        freqs = torch.arange(dim // 2, dtype=torch.float32)[None] / (dim // 2) * 8.0 + 0.5
        emb[ids] = torch.cat([torch.sin(v * freqs * 3.14159), torch.cos(v * freqs * 3.14159)], 1)[:, :dim] * scale


def resolve(path: str | Path | None) -> Path:
    """A checkpoint folder: as given, or a name under the package's models/."""
    if path is None or str(path) == "":
        path = DEFAULT_CHECKPOINT
    p = Path(path)
    if p.is_dir():
        return p
    shipped = share_dir() / "models" / str(path)
    if shipped.is_dir():
        return shipped
    raise CheckpointError(f"checkpoint folder {p} not found (nor {shipped})")


def save(bundle: Bundle, out: str | Path, meta: dict[str, Any] | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in bundle.model.state_dict().items()}
    save_file(state, str(out / WEIGHTS))
    doc = {"model": bundle.config.to_dict(), "schema": bundle.schema.name, "meta": {**bundle.meta, **(meta or {})}}
    (out / CONFIG).write_text(yaml.safe_dump(doc, sort_keys=False))
    bundle.tokenizer.save(out / TOKENIZER)
    src = share_dir() / "config" / "schema"
    if (src / f"{bundle.schema.name}.yaml").is_file():
        shutil.copyfile(src / f"{bundle.schema.name}.yaml", out / SCHEMA)
        if bundle.schema.words:
            shutil.copyfile(src / WORDS, out / WORDS)
    return out


def load(path: str | Path | None, device: str = "cpu") -> Bundle:
    folder = resolve(path)
    for name in (WEIGHTS, CONFIG, TOKENIZER, SCHEMA):
        if not (folder / name).is_file():
            raise CheckpointError(f"checkpoint {folder} lacks {name}")
    try:
        doc = yaml.safe_load((folder / CONFIG).read_text())
        cfg = ModelConfig.from_dict(doc["model"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{folder / CONFIG} is not a valid model config: {e}") from e
    schema = Schema.load(folder / SCHEMA)
    tok = Tokenizer.load(folder / TOKENIZER)
    try:
        tok.check_covers(schema)
    except ValueError as e:
        raise CheckpointError(f"{folder / TOKENIZER} does not fit {folder / SCHEMA}: {e}") from e
    if cfg.vocab_size != len(tok):
        raise CheckpointError(f"{folder / CONFIG} says vocab_size {cfg.vocab_size} but {folder / TOKENIZER} has {len(tok)} tokens")
    layout = Layout(schema, tok, cfg.block_size)
    if cfg.output_len != layout.length:
        raise CheckpointError(f"{folder / CONFIG} says output_len {cfg.output_len} but {folder / SCHEMA} gives {layout.length}")
    if cfg.action_rope_shift and cfg.action_rope_shift > first_action_position(layout):
        # the trajectory's rotary positions would start inside the prompt (and a shift past the start, negative)
        raise CheckpointError(f"{folder / CONFIG} says action_rope_shift {cfg.action_rope_shift} but the trajectory in "
                              f"{folder / SCHEMA} starts {first_action_position(layout)} positions into the plan")
    model = DrivingVLA(cfg)
    try:
        state = load_file(str(folder / WEIGHTS), device=device)
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for corrupt files
        raise CheckpointError(f"{folder / WEIGHTS} could not be read as safetensors: {e}") from e
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        raise CheckpointError(
            f"{folder / WEIGHTS} does not match {folder / CONFIG}: missing {missing[:3]}, unexpected {unexpected[:3]}, "
            f"shape mismatch {[(k, tuple(state[k].shape), tuple(own[k].shape)) for k in wrong[:3]]}"
        )
    model.load_state_dict(state)
    calibration = _checked_calibration(doc.get("calibration"), layout, folder / CONFIG)
    return Bundle(model.eval(), tok, schema, cfg, doc.get("meta", {}), folder, calibration)


CALIBRATION_KEYS = ("logit_bias", "fitted_by")


def _checked_calibration(cal: Any, layout: Layout, where: Path) -> dict[str, Any]:
    """config.yaml's `calibration:` mapping, checked against the layout (CheckpointError naming the file)."""
    if cal is None:
        return {}
    if not isinstance(cal, dict) or set(cal) - set(CALIBRATION_KEYS):
        raise CheckpointError(f"{where}: calibration must be a mapping with keys {list(CALIBRATION_KEYS)}, got {cal!r}")
    try:
        spec = logit_bias.parse(cal.get("logit_bias"), where=f"{where} calibration.logit_bias")
        logit_bias.entries(layout, spec)
    except ValueError as e:
        raise CheckpointError(str(e) if str(where) in str(e) else f"{where} calibration: {e}") from e
    return {**cal, "logit_bias": spec}


def write_calibration(folder: str | Path, calibration: dict[str, Any]) -> Path:
    """Set config.yaml's `calibration:` of a checkpoint folder (checked by loading it back)."""
    path = resolve(folder) / CONFIG
    doc = yaml.safe_load(path.read_text())
    old = path.read_text()
    doc["calibration"] = calibration
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load(path.parent)
    except CheckpointError:
        path.write_text(old)
        raise
    return path
