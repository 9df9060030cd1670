"""PyTorch eager backend: the reference every other backend is compared with."""
from __future__ import annotations

import numpy as np
import torch

from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.runtime.backend import PRIOR_RUN_POSITIONS


def images_to_input(images: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """uint8 (B, 6, H, W, 3) -> float (B, 6, 3, H, W) in [-1, 1].

    On the CPU in float32 numpy does it in a channels-first uint8 copy, one conversion and two in-place
    passes: the same floats bit for bit as the torch expression below, contiguous, about 8x faster (0.21
    against 1.8 ms for six 96x160 frames on one thread: torch's strided uint8 -> float copy is slow),
    and it runs on every plan. Elsewhere (a GPU) the uint8 frames are converted where they are, a quarter of the bytes moved."""
    if images.device.type == "cpu" and dtype == torch.float32 and images.dtype == torch.uint8:
        arr = np.ascontiguousarray(images.numpy().transpose(0, 1, 4, 2, 3)).astype(np.float32)
        np.divide(arr, np.float32(127.5), out=arr)
        arr -= np.float32(1.0)
        return torch.from_numpy(arr)
    return (images.permute(0, 1, 4, 2, 3).to(dtype) / 127.5) - 1.0


def pad_window(logits: torch.Tensor, window: int) -> torch.Tensor:
    """Logits of a block's `valid` positions (n, valid, V), padded with zeros to the window (n, W, V).

    Eager code needs no static shapes, so the padding positions of a short block are never
    computed (blocks of 13..62 positions share a 62-position window); the decoders never read
    logits past a block's end."""
    n, valid, v = logits.shape
    if valid == window:
        return logits
    return torch.cat([logits, logits.new_zeros(n, window - valid, v)], dim=1)


class TorchBackend:
    name = "torch"
    dynamic_windows = True  # a step may start inside a block (decoding/block_loop.py: committed prefix)

    def __init__(self, model: DrivingVLA, window: int, max_rows: int = 1, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, compile: bool = False):
        """compile: run the block step through torch.compile (dynamic shapes: block lengths and live key
        counts vary; the first plan pays the compilation)."""
        self.model = model.to(device=device, dtype=dtype).eval()
        self.device = torch.device(device)
        self.prior_run_positions = PRIOR_RUN_POSITIONS.get(self.device.type, 0)
        self.dtype = dtype
        self.cache = model.new_cache(max_rows, window, device=self.device, dtype=dtype)
        self.max_rows = max_rows
        self.prompt_len = model.cfg.prompt_len
        self.window = window
        self.vocab_size = model.cfg.vocab_size
        self.compiled = compile
        self._step = torch.compile(self.model.step, dynamic=True) if compile else self.model.step

    @torch.inference_mode()
    def prompt(self, images, ego, bos, nav) -> torch.Tensor:
        visual = self.model.encode_images(images_to_input(images.to(self.device), self.dtype))
        return self.model.prompt_embeds(visual, ego.to(self.device, self.dtype), bos.to(self.device), nav.to(self.device))

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        return self.model.prefill(prompt, self.cache.rows(prompt.shape[0])).float()

    @torch.inference_mode()
    def step(self, tokens, start, valid, bidirectional, action) -> torch.Tensor:
        # start and valid stay host integers (layout facts): no scalar copies to the device per step
        n, w = tokens.shape
        return pad_window(self._step(tokens[:, :valid].to(self.device), start, valid, bidirectional,
                                          self.cache.rows(n), action).float(), w)

    def fork(self, n: int, prefix_len: int) -> None:
        self.cache.fork(n, prefix_len)
