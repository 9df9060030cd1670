"""Camera augmentation for training: photometric jitter and small shifts, per sample and camera.

    augment: {brightness: 0.2, contrast: 0.2, shift_px: 4}   # in a training config

- brightness: each camera image's values are offset by U(-b, b) * 255;
- contrast: scaled about the image's mean by U(1 - c, 1 + c);
- shift_px: translated by up to this many pixels in x and y (edges repeated), the same shift for a
  camera's two frames (the rig moves, not the scene between frames).
The trajectory targets are left as they are: shifts of a few pixels at model resolution stay within
the calibration tolerance a real rig has. Images stay uint8 (B, 6, H, W, 3), cameras in the order
[frame0 cam0..2, frame1 cam0..2].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ddrive_ros.training.config_keys import from_checked_dict

CAMERAS = 3


@dataclass(frozen=True)
class CameraAugment:
    brightness: float = 0.0
    contrast: float = 0.0
    shift_px: int = 0

    @classmethod
    def from_dict(cls, d: dict | None) -> "CameraAugment | None":
        """None when the config asks for no augmentation."""
        aug = from_checked_dict(cls, d, "augment")
        if aug.brightness < 0 or aug.contrast < 0 or aug.contrast >= 1 or aug.shift_px < 0:
            raise ValueError(f"augment needs brightness >= 0, 0 <= contrast < 1, shift_px >= 0; got {d}")
        return aug if (aug.brightness or aug.contrast or aug.shift_px) else None

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, views = images.shape[:2]
        x = images.float()
        if self.brightness or self.contrast:
            shape = (b, views, 1, 1, 1)
            u = lambda: torch.rand(shape, generator=generator) * 2 - 1  # noqa: E731
            mean = x.mean(dim=(2, 3, 4), keepdim=True)
            x = (x - mean) * (1 + self.contrast * u()) + mean + self.brightness * 255.0 * u()
        if self.shift_px:
            s = self.shift_px
            h, w = x.shape[2:4]
            padded = torch.nn.functional.pad(x.permute(0, 1, 4, 2, 3).reshape(b * views, 3, h, w), (s, s, s, s),
                                             mode="replicate").reshape(b, views, 3, h + 2 * s, w + 2 * s)
            shifts = torch.randint(0, 2 * s + 1, (b, CAMERAS, 2), generator=generator)
            out = torch.empty_like(x)
            for i in range(b):
                for v in range(views):
                    dy, dx = shifts[i, v % CAMERAS].tolist()
                    out[i, v] = padded[i, v, :, dy:dy + h, dx:dx + w].permute(1, 2, 0)
            x = out
        return x.round().clamp(0, 255).to(torch.uint8)
