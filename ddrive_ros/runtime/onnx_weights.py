"""One weight file for every exported graph.

The exporter writes each graph with its own copy of the weights: the prefill graph, the four live
step graphs and every static step graph all hold the same backbone (about 2.9x the model's size for
the tiny models, 5-9x for a full export; for base-0.8b that is gigabytes of disk). After export,
`share_weights` moves every initializer of at least `MIN_SHARED_BYTES` out of the graphs into one
file, `weights.bin`, each distinct tensor once (found by content), and points the graphs at it with
ONNX external-data references (location, offset, length). ONNX Runtime, TensorRT's file parser and
`onnx.load` resolve the references beside the graph file. Offsets are page-aligned, so a runtime
that memory-maps external data can map it straight from the file.

    stats = share_weights(out_dir, ["vision.onnx", "prefill.onnx", ...])
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

SHARED_WEIGHTS = "weights.bin"
MIN_SHARED_BYTES = 1024  # smaller tensors (norm scales, shape constants) stay inside their graph
ALIGN = 4096


def _raw(tensor) -> bytes:
    """An initializer's bytes in ONNX's raw little-endian layout, whatever field holds them."""
    from onnx import numpy_helper

    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return numpy_helper.to_array(tensor).tobytes()


def share_weights(out_dir: str | Path, files: Sequence[str]) -> dict[str, int]:
    """Rewrite the graphs `files` in `out_dir` to read their large initializers from one shared file.
    Per-graph external data files they had are removed. Returns bytes of initializers before and
    after (the shared file's payload) and the number of distinct tensors."""
    import onnx

    out = Path(out_dir)
    tmp = out / (SHARED_WEIGHTS + ".tmp")
    blobs: dict[str, tuple[int, int]] = {}
    before = 0
    old_data: set[Path] = set()
    protos = {}
    with open(tmp, "wb") as f:
        for name in files:
            path = out / name
            proto = onnx.load(str(path))  # pulls in any external data the graph had
            for t in proto.graph.initializer:
                for entry in t.external_data:
                    if entry.key == "location":
                        old_data.add(out / entry.value)
                data = _raw(t)
                if len(data) < MIN_SHARED_BYTES:
                    continue
                before += len(data)
                key = hashlib.sha256(data).hexdigest()
                if key not in blobs:
                    pad = -f.tell() % ALIGN
                    f.write(b"\0" * pad)
                    blobs[key] = (f.tell(), len(data))
                    f.write(data)
                offset, length = blobs[key]
                for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    t.ClearField(field)
                del t.external_data[:]
                t.data_location = onnx.TensorProto.EXTERNAL
                for k, v in (("location", SHARED_WEIGHTS), ("offset", str(offset)), ("length", str(length))):
                    entry = t.external_data.add()
                    entry.key, entry.value = k, v
            protos[path] = proto
    os.replace(tmp, out / SHARED_WEIGHTS)
    for path, proto in protos.items():
        onnx.save_model(proto, str(path))
    for stale in old_data - {out / SHARED_WEIGHTS}:
        stale.unlink(missing_ok=True)
    after = sum(n for _, n in blobs.values())
    log.info("shared weights: %d graphs, %.1f MB of initializers -> %.1f MB in %s (%d distinct tensors)",
             len(files), before / 1e6, after / 1e6, SHARED_WEIGHTS, len(blobs))
    return {"initializer_bytes_before": before, "shared_bytes": after, "distinct_tensors": len(blobs)}
