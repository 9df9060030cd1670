"""TensorRT backend: engines built from the exported ONNX graphs, run with torch CUDA buffers.

Engines are cached next to their ONNX file and keyed by the ONNX sha256, the
TensorRT version, the GPU name and the precision: an engine is only valid for
the exact graph, library and device it was built for, so any mismatch rebuilds.
Execution binds static torch CUDA tensors with set_tensor_address and enqueues
with execute_async_v3; after one warm-up each engine's enqueue (plus the write
of its window K/V into the cache) is captured in one CUDA graph. The attention
mode and the action flag are device inputs of the step engine, so one graph
per engine serves every (mode, action) pair. `tensorrt` is imported lazily:
this module imports, and its cache logic is tested, without it.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch

from ddrive_ros.model.config import ModelConfig
from ddrive_ros.runtime.onnx_backend import SplitCache
from ddrive_ros.runtime.onnx_export import read_manifest, step_graph_name
from ddrive_ros.runtime.torch_backend import images_to_input

log = logging.getLogger(__name__)

TRT_MISSING = ("TensorRT backend needs the `tensorrt` Python package (pip install tensorrt on a machine with CUDA); "
               "not installed here")
PRECISIONS = ("fp32", "fp16", "bf16")
DEFAULT_WORKSPACE = 4 << 30


def import_tensorrt() -> Any:
    try:
        import tensorrt
    except ImportError as err:
        raise ImportError(TRT_MISSING) from err
    return tensorrt


# ---------------------------------------------------------------------------- engine cache (pure)
def engine_cache_key(onnx_sha256: str, trt_version: str, gpu_name: str, precision: str) -> str:
    """An engine is tied to its graph, the TensorRT version that built it, the GPU and the precision."""
    parts = {"onnx_sha256": onnx_sha256, "tensorrt": trt_version, "gpu": gpu_name, "precision": precision}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def engine_paths(onnx_path: Path, precision: str) -> tuple[Path, Path]:
    """Engine file and its key file, beside the ONNX file."""
    stem = onnx_path.with_suffix("")
    return stem.with_name(f"{stem.name}.{precision}.engine"), stem.with_name(f"{stem.name}.{precision}.engine.json")


def engine_is_current(engine_path: Path, meta_path: Path, key: str) -> bool:
    if not engine_path.is_file() or not meta_path.is_file():
        return False
    try:
        return json.loads(meta_path.read_text()).get("key") == key
    except (json.JSONDecodeError, OSError):
        return False


def ensure_engine(onnx_path: Path, onnx_sha256: str, precision: str, trt_version: str, gpu_name: str,
                  build: Callable[[Path, Path], None]) -> tuple[Path, bool]:
    """Return the cached engine for this key, building it with `build(onnx, engine)` when missing or stale.
    Returns (engine path, whether it was built now)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    key = engine_cache_key(onnx_sha256, trt_version, gpu_name, precision)
    engine_path, meta_path = engine_paths(onnx_path, precision)
    if engine_is_current(engine_path, meta_path, key):
        return engine_path, False
    log.info("building TensorRT engine %s (%s, TensorRT %s, %s)", engine_path.name, precision, trt_version, gpu_name)
    meta_path.unlink(missing_ok=True)  # a half-written engine must never look current
    build(onnx_path, engine_path)
    meta_path.write_text(json.dumps({"key": key, "onnx_sha256": onnx_sha256, "tensorrt": trt_version,
                                     "gpu": gpu_name, "precision": precision}, indent=2))
    return engine_path, True


# ---------------------------------------------------------------------------- build and run
def build_engine(onnx_path: Path, engine_path: Path, precision: str, workspace: int = DEFAULT_WORKSPACE) -> None:
    """Parse the ONNX graph and serialise an engine for its static shapes."""
    trt = import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # the file form finds external weight data
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif precision == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = tuple(tensor.shape)
        if shape:  # min = opt = max: every shape is static; scalars need no entry
            profile.set_shape(tensor.name, shape, shape, shape)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT engine build failed for {onnx_path}")
    engine_path.write_bytes(bytes(serialized))


def _torch_dtype(trt: Any, dtype: Any) -> torch.dtype:
    names = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT32": torch.int32,
             "INT64": torch.int64, "BOOL": torch.bool, "INT8": torch.int8, "UINT8": torch.uint8}
    for name, torch_dtype in names.items():
        if getattr(trt.DataType, name, None) == dtype:
            return torch_dtype
    raise TypeError(f"no torch dtype for TensorRT {dtype}")


class Engine:
    """One deserialised engine with a static torch CUDA tensor bound to every I/O name."""

    def __init__(self, trt: Any, runtime: Any, path: Path, device: torch.device,
                 bound: dict[str, torch.Tensor] | None = None):
        """`bound`: I/O tensors that live elsewhere (the K/V cache, which the step engine reads in place)."""
        self.name = path.name
        self.engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise RuntimeError(f"TensorRT could not load engine {path}")
        self.context = self.engine.create_execution_context()
        self.buffers: dict[str, torch.Tensor] = {}
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            shape = tuple(self.engine.get_tensor_shape(name))
            dtype = _torch_dtype(trt, self.engine.get_tensor_dtype(name))
            tensor = (bound or {}).get(name)
            if tensor is None:
                tensor = torch.zeros(shape, dtype=dtype, device=device)
            elif tuple(tensor.shape) != shape or tensor.dtype != dtype or not tensor.is_contiguous():
                raise ValueError(f"{self.name}: {name} must be a contiguous {dtype} {shape}, got {tensor.dtype} "
                                 f"{tuple(tensor.shape)}")
            self.bind(name, tensor)

    def bind(self, name: str, tensor: torch.Tensor) -> None:
        """Use `tensor` (contiguous, never reallocated) as this I/O tensor's memory."""
        self.buffers[name] = tensor
        self.context.set_tensor_address(name, tensor.data_ptr())

    def enqueue(self) -> None:
        if not self.context.execute_async_v3(torch.cuda.current_stream().cuda_stream):
            raise RuntimeError(f"TensorRT enqueue failed for {self.name}")


class TensorrtBackend:
    name = "tensorrt"

    def __init__(self, onnx_dir: str | Path, window: int, max_rows: int = 1, device: str | torch.device = "cuda",
                 precision: str = "fp16", workspace: int = DEFAULT_WORKSPACE, build_only: bool = False,
                 cuda_graphs: bool = True):
        trt = import_tensorrt()
        self.device = torch.device(device)
        if self.device.type != "cuda" or not torch.cuda.is_available():
            raise RuntimeError(f"TensorRT needs a CUDA device (device={self.device})")
        self.dir = Path(onnx_dir)
        manifest = read_manifest(self.dir)
        if manifest is None:
            raise FileNotFoundError(f"no ONNX export in {self.dir} (manifest.json missing); run export_checkpoint first")
        self.cfg = ModelConfig.from_dict(manifest["model_config"])
        self.window, self.max_rows = window, max_rows
        self.prompt_len, self.vocab_size = self.cfg.prompt_len, self.cfg.vocab_size
        row_counts = sorted({1, max_rows})
        names = ["vision", "prefill", *(step_graph_name(window, r) for r in row_counts)]
        gpu = torch.cuda.get_device_name(self.device)
        paths = {}
        for graph in names:
            if graph not in manifest["graphs"]:
                raise FileNotFoundError(f"ONNX export in {self.dir} lacks graph {graph}")
            entry = manifest["graphs"][graph]
            paths[graph], _ = ensure_engine(self.dir / entry["file"], entry["sha256"], precision, trt.__version__, gpu,
                                            lambda onnx, engine: build_engine(onnx, engine, precision, workspace))
        self.engine_paths = paths
        self.ready = not build_only
        if build_only:
            return
        bb = self.cfg.backbone
        shape = lambda r: (bb.layers, r, bb.kv_heads, self.cfg.cache_len(window), bb.head_dim)  # noqa: E731
        zeros = lambda r: torch.zeros(shape(r), dtype=torch.float32, device=self.device)  # noqa: E731
        self.cache = SplitCache(row_counts, lambda r: (zeros(r), zeros(r)))
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        with torch.cuda.device(self.device):
            self.vision = Engine(trt, runtime, paths["vision"], self.device)
            self.prefill_engine = Engine(trt, runtime, paths["prefill"], self.device)
            self.steps = {r: Engine(trt, runtime, paths[step_graph_name(window, r)], self.device,
                                    bound=dict(zip(("k_cache", "v_cache"), self.cache.stores[r])))
                          for r in row_counts}
        self.offsets = torch.arange(window, device=self.device)
        self.positions = torch.zeros(window, dtype=torch.long, device=self.device)
        self.cuda_graphs = cuda_graphs
        self.stream = torch.cuda.Stream(self.device)
        self.graphs: dict[str, Callable[[], None]] = {}
        self.pool = None
        self._capture_failed_logged = False

    # ------------------------------------------------------------------ graphs
    def _run(self, key: str, fn: Callable[[], None]) -> None:
        """Run on the backend's own stream (TensorRT syncs extra on the legacy default stream), ordered
        after the caller's input copies and before the caller's use of the outputs."""
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            self._replay_or_capture(key, fn)
        caller.wait_stream(self.stream)

    def _replay_or_capture(self, key: str, fn: Callable[[], None]) -> None:
        """Plain enqueue the first time (TensorRT's warm-up), a captured CUDA graph afterwards."""
        if key in self.graphs:
            self.graphs[key]()
            return
        fn()
        if not self.cuda_graphs:
            self.graphs[key] = fn
            return
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                fn()
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[key] = graph.replay
        except RuntimeError as err:
            if not self._capture_failed_logged:
                log.warning("CUDA graph capture of TensorRT enqueue failed (%s); using plain enqueue", err)
                self._capture_failed_logged = True
            self.graphs[key] = fn

    def _check_ready(self) -> None:
        if not self.ready:
            raise RuntimeError("this TensorRT backend was made with build_only=True: engines are built, nothing runs")

    # ------------------------------------------------------------------ Backend
    @torch.inference_mode()
    def prompt(self, images, ego, bos, nav) -> torch.Tensor:
        self._check_ready()
        buf = self.vision.buffers
        buf["images"].copy_(images_to_input(images.to(self.device), torch.float32))
        buf["ego"].copy_(ego)
        buf["bos"].copy_(bos.reshape(1))
        buf["nav"].copy_(nav.reshape(1))
        self._run("vision", self.vision.enqueue)
        return buf["prompt_embeds"].clone()

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        self._check_ready()
        if prompt.shape[0] != 1:
            raise ValueError(f"prefill takes one prompt row, got {prompt.shape[0]} (fork after prefill)")
        engine = self.prefill_engine
        engine.buffers["prompt_embeds"].copy_(prompt)
        k, v, _ = self.cache.use(1)
        p = self.prompt_len

        def run() -> None:
            engine.enqueue()
            k[:, :, :, :p].copy_(engine.buffers["k_prompt"])
            v[:, :, :, :p].copy_(engine.buffers["v_prompt"])

        self._run("prefill", run)
        return engine.buffers["logits"].clone()

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, start: int, valid: int, bidirectional: bool, action: bool) -> torch.Tensor:
        self._check_ready()
        n = tokens.shape[0]
        k, v, rows = self.cache.use(n)
        engine = self.steps[rows]
        buf = engine.buffers
        buf["tokens"][:n].copy_(tokens)
        if rows > n:  # padding rows: computed and thrown away
            buf["tokens"][n:].copy_(tokens[-1:].expand(rows - n, -1))
        buf["start"].fill_(start)
        buf["valid"].fill_(valid)
        buf["bidirectional"].fill_(bool(bidirectional))
        buf["action"].fill_(bool(action))

        def run() -> None:
            engine.enqueue()
            # no in-place writes in ONNX: the window's K/V land in the cache here, at device positions
            torch.add(self.offsets, buf["start"], out=self.positions)
            k.index_copy_(3, self.positions, buf["k_window"])
            v.index_copy_(3, self.positions, buf["v_window"])

        self._run(f"step_n{rows}", run)
        return buf["logits"][:n].clone()

    def fork(self, n: int, prefix_len: int) -> None:
        self.cache.fork(n, prefix_len)
