"""ONNX Runtime backend: the exported live step graphs behind the Backend interface.

Each step runs the graph for its kind (draft or causal, shared or action
section) on the block's own tokens and the cache prefix that exists, so no
padding position, no absent key, no unused FFN or head is computed. ONNX has no
in-place writes, so this backend owns the K/V cache and writes each step's
returned window K/V into it at [start, start + valid). Row counts are dynamic
axes; the cache keeps one contiguous store per row count (see `SplitCache`).
`int8=True` runs dynamically quantised copies of the step and prefill graphs.
`io_binding=True` keeps the cache as a torch tensor on the provider's device and
binds it by pointer (`onnx_io_binding.py`): with the CUDA provider no step moves
the cache through the host.
The prompt is built from per-image vision tokens (views.onnx, one frame's cameras
per run) kept by image content, so on a stream a frame already seen as the
current frame is not encoded again as the history frame (`view_cache.py`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ddrive_ros.model.config import ModelConfig
from ddrive_ros.runtime.backend import PRIOR_RUN_POSITIONS
from ddrive_ros.observation import CAMERAS
from ddrive_ros.runtime.onnx_export import LIVE_GRAPHS, live_graph_name, read_manifest
from ddrive_ros.runtime.onnx_io_binding import run_bound
from ddrive_ros.runtime.torch_backend import images_to_input, pad_window
from ddrive_ros.runtime.view_cache import ViewTokenCache

log = logging.getLogger(__name__)


class SplitCache:
    """One contiguous K/V store per static row count (e.g. 1 and max_rows).

    A graph for n rows takes a (layers, n, kv_heads, T, head_dim) cache input; a
    slice of a larger store is not contiguous, so each row count gets its own
    store. Only one store is live: switching copies the shared leading rows
    across, so row 0 carries over into a fork without any forward. Works on
    numpy arrays and torch tensors alike (slice assignment only).
    """

    def __init__(self, rows: Sequence[int], make: Callable[[int], tuple[Any, Any]]):
        self.rows = sorted(set(rows))
        self.stores = {r: make(r) for r in self.rows}
        self.live = self.rows[0]

    def rows_for(self, n: int) -> int:
        for r in self.rows:
            if r >= n:
                return r
        raise ValueError(f"cache holds {self.rows[-1]} rows, {n} requested (raise max rollouts)")

    def use(self, n: int) -> tuple[Any, Any, int]:
        """The store that serves n rows, made live (with the previous live store's rows copied in)."""
        r = self.rows_for(n)
        if r != self.live:
            m = min(r, self.live)
            (k_old, v_old), (k, v) = self.stores[self.live], self.stores[r]
            k[:, :m] = k_old[:, :m]
            v[:, :m] = v_old[:, :m]
            self.live = r
        return (*self.stores[r], r)

    def fork(self, n: int, prefix_len: int) -> None:
        k, v, _ = self.use(n)
        k[:, 1:n, :, :prefix_len] = k[:, :1, :, :prefix_len]
        v[:, 1:n, :, :prefix_len] = v[:, :1, :, :prefix_len]


def default_providers() -> list[str]:
    """CUDA when ONNX Runtime has it and a GPU is really there (onnxruntime-gpu lists it regardless), else CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if "CUDAExecutionProvider" in available and torch.cuda.is_available():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OnnxBackend:
    name = "onnx"
    dynamic_windows = True  # a step may start inside a block (decoding/block_loop.py: committed prefix)

    def __init__(self, onnx_dir: str | Path, window: int, max_rows: int = 1, providers: Sequence[str] | None = None,
                 threads: int | None = None, int8: bool = False, io_binding: bool | None = None):
        import onnxruntime as ort

        self.dir = Path(onnx_dir)
        manifest = read_manifest(self.dir)
        if manifest is None:
            raise FileNotFoundError(f"no ONNX export in {self.dir} (manifest.json missing); run export_checkpoint first")
        self.cfg = ModelConfig.from_dict(manifest["model_config"])
        self.manifest = manifest
        self.window = window
        self.max_rows = max_rows
        self.prompt_len = self.cfg.prompt_len
        self.vocab_size = self.cfg.vocab_size
        row_counts = sorted({1, max_rows})
        missing = [g for g in ["views", "assemble", "prefill", *LIVE_GRAPHS] if g not in manifest["graphs"]]
        if missing:
            raise FileNotFoundError(f"ONNX export in {self.dir} lacks graphs {missing}; export it again with this "
                                    f"version (export_checkpoint writes them)")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # a pinned thread count means sharing the CPU: do not burn it spinning between runs
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.providers = list(providers) if providers else default_providers()
        self.int8 = int8
        # io_binding: the cache is a torch tensor on the provider's device and the graphs read and write
        # it by pointer (onnx_io_binding.py); without it, numpy arrays on the host fed through run().
        # Default: on with the CUDA provider (the cache stays on the GPU), off on the CPU, where numpy's
        # slicing is cheaper than torch's per-op dispatch (trajectory_only steps 6.7 against 7.2 ms per plan)
        self.device = torch.device("cuda" if self.providers[0] == "CUDAExecutionProvider" else "cpu")
        self.io_binding = self.device.type == "cuda" if io_binding is None else bool(io_binding)
        self.prior_run_positions = PRIOR_RUN_POSITIONS.get(self.device.type, 0)
        io_binding = self.io_binding
        session_providers: list[Any] = list(self.providers)
        if io_binding and self.device.type == "cuda":
            from ddrive_ros.runtime.onnx_io_binding import cuda_provider_options

            session_providers[0] = ("CUDAExecutionProvider", cuda_provider_options())

        def session(graph: str, quantise: bool = False) -> Any:
            path = self.dir / manifest["graphs"][graph]["file"]
            if quantise:
                from ddrive_ros.runtime.int8 import ensure_int8

                path = ensure_int8(path, manifest["graphs"][graph]["sha256"])
            return ort.InferenceSession(str(path), sess_options=options, providers=session_providers)

        # convolutions and a few small layers: not worth quantising (measured slower, docs/speed.md)
        self.views = session("views")
        self.assemble = session("assemble")
        self.view_cache = ViewTokenCache(len(CAMERAS))
        self.prefill_session = session("prefill", int8)
        self.steps = {name: session(name, int8) for name in LIVE_GRAPHS}
        bb = self.cfg.backbone
        shape = lambda r: (bb.layers, r, bb.kv_heads, self.cfg.cache_len(window), bb.head_dim)  # noqa: E731
        if io_binding:
            zeros = lambda r: torch.zeros(shape(r), dtype=torch.float32, device=self.device)  # noqa: E731
        else:
            zeros = lambda r: np.zeros(shape(r), np.float32)  # noqa: E731
        self.cache = SplitCache(row_counts, lambda r: (zeros(r), zeros(r)))
        log.info("ONNX Runtime backend on %s: window %d, rows %s", self.providers[0], window, row_counts)

    def _encode_frame(self, images: np.ndarray) -> np.ndarray:
        x = images_to_input(torch.from_numpy(images)[None], torch.float32)[0].numpy()
        return self.views.run(["view_tokens"], {"images": x})[0]

    @torch.inference_mode()
    def prompt(self, images, ego, bos, nav) -> torch.Tensor:
        view_tokens = self.view_cache.tokens(images.cpu().numpy()[0], self._encode_frame)
        feeds = {
            "view_tokens": view_tokens[None],
            "ego": ego.cpu().float().numpy(),
            "bos": bos.cpu().long().numpy().reshape(1),
            "nav": nav.cpu().long().numpy().reshape(1),
        }
        return torch.from_numpy(self.assemble.run(["prompt_embeds"], feeds)[0])

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        if prompt.shape[0] != 1:
            raise ValueError(f"prefill takes one prompt row, got {prompt.shape[0]} (fork after prefill)")
        k_cache, v_cache, _ = self.cache.use(1)
        p = prompt.shape[1]
        if self.io_binding:
            bb = self.cfg.backbone
            kv = (bb.layers, 1, bb.kv_heads, p, bb.head_dim)
            logits, k, v = (torch.empty(s, device=self.device) for s in ((1, self.vocab_size), kv, kv))
            run_bound(self.prefill_session, {"prompt_embeds": prompt.detach().to(self.device, torch.float32).contiguous()},
                      {"logits": logits, "k_prompt": k, "v_prompt": v})
        else:
            logits, k, v = self.prefill_session.run(None, {"prompt_embeds": prompt.detach().cpu().float().numpy()})
            logits = torch.from_numpy(logits)
        k_cache[:, :1, :, :p] = k
        v_cache[:, :1, :, :p] = v
        return logits

    def step(self, tokens: torch.Tensor, start: int, valid: int, bidirectional: bool, action: bool) -> torch.Tensor:
        n, w = tokens.shape
        k_cache, v_cache, _ = self.cache.use(n)
        graph = self.steps[live_graph_name(not bidirectional, bool(action))]
        if self.io_binding:
            return pad_window(self._step_bound(graph, tokens, k_cache, v_cache, n, start, valid), w)
        feeds = {
            "tokens": tokens[:, :valid].detach().cpu().long().numpy(),
            # only the keys that exist; one contiguous copy of the prefix (the cache's position axis is inner)
            "k_prefix": np.ascontiguousarray(k_cache[:, :n, :, :start]),
            "v_prefix": np.ascontiguousarray(v_cache[:, :n, :, :start]),
        }
        logits, k, v = graph.run(None, feeds)
        k_cache[:, :n, :, start:start + valid] = k
        v_cache[:, :n, :, start:start + valid] = v
        return pad_window(torch.from_numpy(logits), w)

    def _step_bound(self, graph: Any, tokens: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n: int,
                    start: int, valid: int) -> torch.Tensor:
        """The step with the cache where it lives: the prefix copied contiguous on its device, the
        window's K/V written by the graph into device buffers and from there into the cache."""
        bb = self.cfg.backbone
        window_kv = (bb.layers, n, bb.kv_heads, valid, bb.head_dim)
        logits = torch.empty((n, valid, self.vocab_size), device=self.device)
        k, v = torch.empty(window_kv, device=self.device), torch.empty(window_kv, device=self.device)
        run_bound(graph, {"tokens": tokens[:, :valid].to(self.device, torch.int64).contiguous(),
                          "k_prefix": k_cache[:, :n, :, :start].contiguous(),
                          "v_prefix": v_cache[:, :n, :, :start].contiguous()},
                  {"logits": logits, "k_window": k, "v_window": v})
        k_cache[:, :n, :, start:start + valid] = k
        v_cache[:, :n, :, start:start + valid] = v
        return logits

    def fork(self, n: int, prefix_len: int) -> None:
        self.cache.fork(n, prefix_len)
