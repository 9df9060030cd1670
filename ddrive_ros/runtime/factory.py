"""Backends by name: what the planner calls, so it never imports a runtime it does not use."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.runtime.backend import Backend

BACKENDS = ("torch", "cuda_graph", "onnx", "tensorrt")
TRT_PRECISION = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def default_onnx_dir(model: DrivingVLA) -> Path:
    """Per-user cache folder for exports, keyed by config name and weights, so it never goes stale."""
    from ddrive_ros.runtime.onnx_export import weights_sha256

    return Path.home() / ".cache" / "ddrive_ros" / "onnx" / f"{model.cfg.name}-{weights_sha256(model)[:16]}"


def make_backend(name: str, model: DrivingVLA, window: int, max_rows: int = 1, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, **opts: Any) -> Backend:
    """Build a backend for blocks of `window` positions and up to `max_rows` rows.

    opts per backend:
      torch:      compile (bool: torch.compile the block step)
      cuda_graph: graphs (bool)
      onnx:       onnx_dir (export folder; exported there when missing or stale), providers, threads,
                  int8 (bool: dynamically quantised step and prefill graphs),
                  io_binding (bool: the cache a torch tensor bound by pointer; default on with CUDA, off on CPU)
      tensorrt:   onnx_dir, precision ('fp32'|'fp16'|'bf16', default from dtype), workspace (bytes),
                  build_only, cuda_graphs
    """
    if name == "torch":
        from ddrive_ros.runtime.torch_backend import TorchBackend

        unknown = set(opts) - {"compile"}
        if unknown:
            raise ValueError(f"backend torch takes only the option 'compile', got {sorted(unknown)}")
        return TorchBackend(model, window, max_rows, device, dtype, **opts)
    if name == "cuda_graph":
        from ddrive_ros.runtime.cuda_graph_backend import CudaGraphBackend

        return CudaGraphBackend(model, window, max_rows, device, dtype, **opts)
    if name in ("onnx", "tensorrt"):
        from ddrive_ros.runtime.onnx_export import ensure_exported

        if name == "tensorrt":
            # fail on a missing tensorrt before spending time on an export
            from ddrive_ros.runtime.tensorrt_backend import import_tensorrt

            import_tensorrt()
        onnx_dir = Path(opts.pop("onnx_dir", None) or default_onnx_dir(model))
        # ONNX Runtime runs the live graphs (dynamic rows and lengths); TensorRT the static step graphs
        if name == "onnx":
            ensure_exported(model, [], onnx_dir, [])
        else:
            ensure_exported(model, [window], onnx_dir, sorted({1, max_rows}))
        if name == "onnx":
            from ddrive_ros.runtime.onnx_backend import OnnxBackend

            return OnnxBackend(onnx_dir, window, max_rows, **opts)
        from ddrive_ros.runtime.tensorrt_backend import TensorrtBackend

        opts.setdefault("precision", TRT_PRECISION.get(dtype, "fp16"))
        return TensorrtBackend(onnx_dir, window, max_rows, device=device, **opts)
    raise ValueError(f"unknown backend {name!r}; choose one of {list(BACKENDS)}")

