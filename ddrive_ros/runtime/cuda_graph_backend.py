"""PyTorch CUDA-graph backend: the eager model, captured once per step kind and replayed.

Launch overhead is the second lever after the forward count: a 0.8B block step
is a few hundred kernels of microseconds each. Every input lives in a static
device buffer (tokens, prompt, images). Attention reads only the live keys of
the cache, so a block's shapes depend on where it starts: one graph per
(rows, block start, valid length, attention mode, action), a finite set fixed
by the layout. `warmup` captures every one a plan will use before the first
plan, so no plan pays a capture; anything not warmed up is captured on first
use, after one warm-up on a side stream, into one shared memory pool.
"""
from __future__ import annotations

import logging
from typing import Callable

import torch

from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.runtime.torch_backend import images_to_input, pad_window

log = logging.getLogger(__name__)

NO_CUDA = "CUDA graphs need a CUDA device (device={device}, torch.cuda.is_available()={avail}); use backend 'torch' here"


class CudaGraphBackend:
    name = "cuda_graph"

    def __init__(self, model: DrivingVLA, window: int, max_rows: int = 1, device: str | torch.device = "cuda",
                 dtype: torch.dtype = torch.bfloat16, graphs: bool = True):
        """graphs=False runs the very same static-buffer calls eagerly (debugging, and the CPU test of this path)."""
        self.device = torch.device(device)
        if graphs and (self.device.type != "cuda" or not torch.cuda.is_available()):
            raise RuntimeError(NO_CUDA.format(device=self.device, avail=torch.cuda.is_available()))
        self.graphs = graphs
        self.model = model.to(device=self.device, dtype=dtype).eval()
        self.dtype = dtype
        self.window = window
        self.max_rows = max_rows
        self.prompt_len = model.cfg.prompt_len
        self.vocab_size = model.cfg.vocab_size
        self.cache = model.new_cache(max_rows, window, device=self.device, dtype=dtype)
        cfg, dev = model.cfg, self.device
        h, w = cfg.vision.image_size
        n_views = cfg.image_tokens // cfg.vision.tokens_per_image
        # static inputs: every replay reads these addresses
        self.images = torch.zeros(1, n_views, h, w, 3, dtype=torch.uint8, device=dev)
        self.ego = torch.zeros(1, model.ego.mlp[0].in_features, dtype=dtype, device=dev)
        self.bos = torch.zeros(1, dtype=torch.long, device=dev)
        self.nav = torch.zeros(1, dtype=torch.long, device=dev)
        self.prompt_buf = torch.zeros(1, cfg.prompt_len, cfg.backbone.dim, dtype=dtype, device=dev)
        self.tokens = {n: torch.zeros(n, window, dtype=torch.long, device=dev) for n in sorted({1, max_rows})}
        self.calls: dict[tuple, Callable[[], torch.Tensor]] = {}
        self.pool = None

    # ------------------------------------------------------------------ capture
    def _capture(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """Warm up once on a side stream, capture into the shared pool, and return a replay."""
        if not self.graphs:
            return fn
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            fn()  # lazy inits (cuBLAS handles, allocator blocks) must happen outside the capture
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = fn()
        if self.pool is None:
            self.pool = graph.pool()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    def _call(self, key: tuple, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key not in self.calls:
            log.debug("capturing CUDA graph %s", key)
            self.calls[key] = self._capture(fn)
        # the output buffer is overwritten by the next replay; callers keep views of it (the carry)
        return self.calls[key]().clone()

    def _tokens_for(self, n: int) -> torch.Tensor:
        if n in self.tokens:
            return self.tokens[n]
        # a row count between 1 and max_rows gets its own buffer (and graphs) on first use
        if n > self.max_rows:
            raise ValueError(f"cache holds {self.max_rows} rows, {n} requested (raise max rollouts)")
        self.tokens[n] = torch.zeros(n, self.window, dtype=torch.long, device=self.device)
        return self.tokens[n]

    # ------------------------------------------------------------------ Backend
    @torch.inference_mode()
    def prompt(self, images, ego, bos, nav) -> torch.Tensor:
        self.images.copy_(images)
        self.ego.copy_(ego)
        self.bos.copy_(bos.reshape(1))
        self.nav.copy_(nav.reshape(1))
        model = self.model

        def run() -> torch.Tensor:
            visual = model.encode_images(images_to_input(self.images, self.dtype))
            return model.prompt_embeds(visual, self.ego, self.bos, self.nav)

        return self._call(("prompt",), run)

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        if prompt.shape[0] != 1:
            raise ValueError(f"prefill takes one prompt row, got {prompt.shape[0]} (fork after prefill)")
        self.prompt_buf.copy_(prompt)
        return self._call(("prefill",), lambda: self.model.prefill(self.prompt_buf, self.cache.rows(1)).float())

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, start: int, valid: int, bidirectional: bool, action: bool) -> torch.Tensor:
        n = tokens.shape[0]
        buf = self._tokens_for(n)
        buf.copy_(tokens)
        start, valid, bidirectional, action = int(start), int(valid), bool(bidirectional), bool(action)
        view = self.cache.rows(n)

        def run() -> torch.Tensor:
            # the graph is per (start, valid) anyway: the window's padding is never computed
            return pad_window(self.model.step(buf[:, :valid], start, valid, bidirectional, view, action).float(),
                              self.window)

        return self._call(("step", n, start, valid, bidirectional, action), run)

    @torch.inference_mode()
    def warmup(self, layout, rollouts: int = 1, modes: tuple[bool, ...] = (True, False)) -> int:
        """Capture every step graph a plan over `layout` can use (rows 1 before the trajectory fork,
        `rollouts` rows after it; `modes`: the attention modes the decoder uses). Returns the count.
        The cache is scribbled on; every plan prefills it again."""
        names = layout.schema.section_names
        fork_at = layout.section_blocks(names.index("trajectory"))[0].index if "trajectory" in names else -1
        captured = 0
        rows = 1
        for block in layout.blocks:
            if block.index == fork_at:
                rows = max(1, rollouts)
            tokens = torch.as_tensor(layout.template_ids[block.start:block.start + self.window], device=self.device)
            tokens = torch.nn.functional.pad(tokens, (0, self.window - tokens.shape[0]))[None].expand(rows, -1)
            for bidirectional in modes:
                key = ("step", rows, self.prompt_len + block.start, block.length, bidirectional,
                       bool(layout.action[block.start]))
                if key not in self.calls:
                    self.step(tokens, key[2], key[3], bidirectional, key[5])
                    captured += 1
        return captured

    def fork(self, n: int, prefix_len: int) -> None:
        self.cache.fork(n, prefix_len)
