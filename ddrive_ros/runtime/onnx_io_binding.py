"""ONNX Runtime I/O binding over torch tensors: a graph reads its inputs and writes its outputs where
they already are, bound by pointer, with torch owning the memory.

With the CUDA provider this keeps the K/V cache on the GPU: the live step graphs read the cache
prefix and write the window's K/V into device buffers that torch then copies into the cache in place,
and the logits stay on the device for the decode loop, so no step moves the cache through the host
(plain `InferenceSession.run` copies every numpy input to the device and every output back). ORT and
torch share one CUDA stream (`cuda_provider_options`), so no synchronisation is needed between them.
On the CPU the same code binds host memory: no output is allocated by ORT, and the logits come back
as the torch tensor the loop works on.

API used (onnxruntime.IOBinding): `bind_input` / `bind_output(name, device_type, device_id,
element_type, shape, buffer_ptr)`, then `InferenceSession.run_with_iobinding`.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

_ELEMENT = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64, torch.int32: np.int32,
            torch.bool: np.bool_}


def cuda_provider_options() -> dict[str, str]:
    """CUDA provider options that put ORT's kernels on torch's current stream (ordered with torch's
    own copies into and out of the bound buffers)."""
    return {"has_user_compute_stream": "1", "user_compute_stream": str(torch.cuda.current_stream().cuda_stream)}


def _bind(binding: Any, name: str, tensor: torch.Tensor, output: bool) -> None:
    if tensor.dtype not in _ELEMENT:
        raise TypeError(f"I/O binding of {name!r}: dtype {tensor.dtype} is not supported")
    if not tensor.is_contiguous():
        raise ValueError(f"I/O binding of {name!r} needs a contiguous tensor (shape {tuple(tensor.shape)})")
    device = tensor.device
    args = (name, device.type, device.index or 0, _ELEMENT[tensor.dtype], list(tensor.shape), tensor.data_ptr())
    (binding.bind_output if output else binding.bind_input)(*args)


def run_bound(session: Any, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor]) -> None:
    """Run `session` reading `inputs` and writing into `outputs` in place (contiguous torch tensors on
    the session's device, each output exactly the shape the graph produces for these inputs)."""
    binding = session.io_binding()
    for name, t in inputs.items():
        _bind(binding, name, t, output=False)
    for name, t in outputs.items():
        _bind(binding, name, t, output=True)
    session.run_with_iobinding(binding)
