"""Dynamic int8 quantisation of exported graphs for ONNX Runtime on the CPU.

Weights of the MatMul/Gemm layers are stored as int8 with per-tensor scales;
activations are quantised on the fly per call. It is an option, not the
default: it changes the numbers, so plans can differ from fp32 (bench/cpu_speed.py
reports the token match rate and the trajectory difference). A quantised copy
sits next to its source graph and is keyed by the source's sha256 and RECIPE, so a new
export (or a new recipe) never runs with stale int8 weights.

Weights use 7 bits (`reduce_range`): on x86 CPUs without VNNI (AVX2 only) ONNX
Runtime multiplies u8 activations by s8 weights with VPMADDUBSW, whose 16-bit
pair sums saturate at full range (ONNX Runtime's quantisation docs); on such a
CPU (an AMD EPYC with AVX2) full-range weights put the prefill's largest error at
18% of its largest value, 7-bit weights under 10%.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

RECIPE = "dynamic, QInt8 weights per tensor, reduce_range"

log = logging.getLogger(__name__)


def int8_paths(onnx_path: Path) -> tuple[Path, Path]:
    stem = onnx_path.with_suffix("")
    return stem.with_name(f"{stem.name}.int8.onnx"), stem.with_name(f"{stem.name}.int8.json")


def ensure_int8(onnx_path: Path, source_sha256: str) -> Path:
    """The int8 copy of `onnx_path`, quantised now when missing or made from another source."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out, meta = int8_paths(onnx_path)
    if out.is_file() and meta.is_file() and json.loads(meta.read_text()) == _meta(onnx_path, source_sha256):
        return out
    meta.unlink(missing_ok=True)  # a half-written copy must never look current
    log.info("quantising %s to int8 (%s)", onnx_path.name, RECIPE)
    quantize_dynamic(str(onnx_path), str(out), weight_type=QuantType.QInt8, reduce_range=True)
    meta.write_text(json.dumps(_meta(onnx_path, source_sha256), indent=2))
    return out


def _meta(onnx_path: Path, source_sha256: str) -> dict:
    """What a quantised copy was made from and how: a copy made another way is made again."""
    return {"source_sha256": source_sha256, "source": onnx_path.name, "recipe": RECIPE}
