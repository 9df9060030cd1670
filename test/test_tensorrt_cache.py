"""TensorRT engine cache: keyed by graph, library, GPU and precision; rebuilt on any mismatch (no TensorRT needed)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ddrive_ros.runtime.tensorrt_backend import (TRT_MISSING, TensorrtBackend, engine_cache_key, engine_paths,
                                                 ensure_engine)

HAS_TRT = importlib.util.find_spec("tensorrt") is not None


class FakeBuilder:
    """Stands in for build_engine: writes an engine file and counts builds."""

    def __init__(self, fail: bool = False):
        self.builds = 0
        self.fail = fail

    def __call__(self, onnx_path: Path, engine_path: Path) -> None:
        self.builds += 1
        if self.fail:
            engine_path.write_bytes(b"half an engine")
            raise RuntimeError("build failed")
        engine_path.write_bytes(b"engine from " + onnx_path.name.encode())


@pytest.fixture
def onnx_file(tmp_path) -> Path:
    path = tmp_path / "step_w62_n1.onnx"
    path.write_bytes(b"graph")
    return path


def ensure(onnx_file: Path, build: FakeBuilder, sha="aa", version="10.3.0", gpu="NVIDIA H200", precision="fp16"):
    return ensure_engine(onnx_file, sha, precision, version, gpu, build)


def test_cache_key_depends_on_every_part_and_nothing_else():
    base = engine_cache_key("aa", "10.3.0", "NVIDIA H200", "fp16")
    assert base == engine_cache_key("aa", "10.3.0", "NVIDIA H200", "fp16")
    others = {engine_cache_key("bb", "10.3.0", "NVIDIA H200", "fp16"),
              engine_cache_key("aa", "10.4.0", "NVIDIA H200", "fp16"),
              engine_cache_key("aa", "10.3.0", "NVIDIA Thor", "fp16"),
              engine_cache_key("aa", "10.3.0", "NVIDIA H200", "bf16")}
    assert base not in others and len(others) == 4


def test_engine_lives_beside_its_onnx_file_per_precision(onnx_file):
    engine, meta = engine_paths(onnx_file, "bf16")
    assert engine.parent == onnx_file.parent
    assert engine.name == "step_w62_n1.bf16.engine" and meta.name == "step_w62_n1.bf16.engine.json"


def test_engine_is_built_once_then_reused(onnx_file):
    build = FakeBuilder()
    path, built = ensure(onnx_file, build)
    assert built and path.read_bytes() == b"engine from step_w62_n1.onnx"
    path2, built2 = ensure(onnx_file, build)
    assert path2 == path and not built2 and build.builds == 1


@pytest.mark.parametrize("change", [{"sha": "bb"}, {"version": "10.4.0"}, {"gpu": "NVIDIA DRIVE Thor"}])
def test_engine_is_rebuilt_when_graph_tensorrt_or_gpu_change(onnx_file, change):
    build = FakeBuilder()
    ensure(onnx_file, build)
    _, built = ensure(onnx_file, build, **change)
    assert built and build.builds == 2
    _, built_again = ensure(onnx_file, build, **change)
    assert not built_again


def test_precisions_keep_separate_engines(onnx_file):
    build = FakeBuilder()
    fp16, _ = ensure(onnx_file, build, precision="fp16")
    bf16, _ = ensure(onnx_file, build, precision="bf16")
    assert fp16 != bf16 and build.builds == 2
    assert not ensure(onnx_file, build, precision="fp16")[1]
    with pytest.raises(ValueError, match="precision"):
        ensure(onnx_file, build, precision="int4")


def test_a_missing_engine_or_a_corrupt_key_file_rebuilds(onnx_file):
    build = FakeBuilder()
    engine, meta = ensure(onnx_file, build)[0], engine_paths(onnx_file, "fp16")[1]
    engine.unlink()
    assert ensure(onnx_file, build)[1]
    meta.write_text("{not json")
    assert ensure(onnx_file, build)[1]
    assert json.loads(meta.read_text())["gpu"] == "NVIDIA H200"


def test_a_failed_build_never_leaves_a_current_looking_engine(onnx_file):
    ensure(onnx_file, FakeBuilder())
    with pytest.raises(RuntimeError, match="build failed"):
        ensure(onnx_file, FakeBuilder(fail=True), version="10.4.0")
    # the failed build overwrote the engine file; its old key file is gone too, so even the old key rebuilds
    build = FakeBuilder()
    path, built = ensure(onnx_file, build)
    assert built and path.read_bytes() == b"engine from step_w62_n1.onnx"


@pytest.mark.skipif(HAS_TRT, reason="tensorrt is installed here")
def test_backend_without_tensorrt_says_what_is_missing(tmp_path):
    with pytest.raises(ImportError) as err:
        TensorrtBackend(tmp_path, window=62)
    assert str(err.value) == TRT_MISSING
    assert "pip install tensorrt" in TRT_MISSING
