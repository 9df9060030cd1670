"""Model configuration, read from `config/model/NAME.yaml` or a checkpoint's config.yaml."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ddrive_ros import config_file
from ddrive_ros.observation import CAMERAS

N_FRAMES = 2


@dataclass(frozen=True)
class VisionConfig:
    image_size: tuple[int, int] = (96, 160)  # H, W
    patch: int = 16
    dim: int = 96
    depth: int = 2
    heads: int = 4
    mlp: int = 192
    merge: int = 2

    @property
    def grid(self) -> tuple[int, int]:
        return self.image_size[0] // self.patch, self.image_size[1] // self.patch

    @property
    def tokens_per_image(self) -> int:
        gh, gw = self.grid
        return (gh // self.merge) * (gw // self.merge)


@dataclass(frozen=True)
class BackboneConfig:
    dim: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn_hidden: int = 352
    action_ffn_hidden: int = 128
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"model config {name} must be true or false, got {value!r}")
    return value


def _shift(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"model config action_rope_shift must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vision: VisionConfig
    backbone: BackboneConfig
    ego_tokens: int = 2
    vocab_size: int = 0  # set from the tokenizer
    output_len: int = 0  # template length of the schema
    block_size: int = 32  # block size the checkpoint was trained for (decoders default to it)
    # False: the model does not read the ego's measured acceleration (its input is held at 0, in training and
    # planning alike). Read in the closed loop, it fed a plan-to-plan oscillation (docs/closed_loop.md)
    ego_accel: bool = True
    # The trajectory (action) positions' rotary positions are their cache positions minus this. 0: every token at
    # its own position. The full plan's trajectory comes some 270 positions after the prompt's image tokens, where
    # trajectory_only's comes right after them; a shift equal to the trajectory's offset in the template puts its
    # rotary positions right after the prompt, as in trajectory_only (`checkpoint.build_random(action_after_prompt=)`).
    # Attention masks and the cache use the real positions; only the rotation changes.
    action_rope_shift: int = 0

    @property
    def image_tokens(self) -> int:
        return N_FRAMES * len(CAMERAS) * self.vision.tokens_per_image

    @property
    def prompt_len(self) -> int:
        return 1 + self.image_tokens + self.ego_tokens + 1  # <bos> images ego <nav>

    def cache_len(self, window: int) -> int:
        """Cache length: prompt + output + one window of room for a padded last block."""
        return self.prompt_len + self.output_len + window

    @property
    def rope_len(self) -> int:
        return self.prompt_len + 2 * self.output_len

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        v = dict(d.get("vision", {}))
        if "image_size" in v:
            v["image_size"] = tuple(v["image_size"])
        return cls(
            name=d.get("name", "custom"),
            vision=VisionConfig(**v),
            backbone=BackboneConfig(**d.get("backbone", {})),
            ego_tokens=int(d.get("ego_tokens", 2)),
            vocab_size=int(d.get("vocab_size", 0)),
            output_len=int(d.get("output_len", 0)),
            block_size=int(d.get("block_size", 32)),
            ego_accel=_bool(d.get("ego_accel", True), "ego_accel"),
            action_rope_shift=_shift(d.get("action_rope_shift", 0)),
        )

    @classmethod
    def load(cls, name_or_path: str | Path) -> "ModelConfig":
        path = config_file("model", name_or_path, "config")
        return cls.from_dict(yaml.safe_load(path.read_text()))

    def with_output(self, vocab_size: int, output_len: int, block_size: int = 32) -> "ModelConfig":
        d = self.to_dict()
        d.update(vocab_size=vocab_size, output_len=output_len, block_size=block_size)
        return ModelConfig.from_dict(d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["vision"]["image_size"] = list(self.vision.image_size)
        return d
