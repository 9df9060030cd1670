"""ONNX export of the driving VLA: vision, prefill, and the block step in two families.

- vision.onnx:  images (1, 6, 3, H, W) float in [-1, 1], ego (1, F), bos (1,), nav (1,)
                -> visual_tokens (1, N, D), prompt_embeds (1, P, D)   (TensorRT: one engine)
- views.onnx:   one frame's images (3, 3, H, W) -> view_tokens (3, T, D), before the camera/frame
                embedding; assemble.onnx: view_tokens (1, 6, T, D), ego, bos, nav -> prompt_embeds.
                ONNX Runtime runs these two, so a frame seen again reuses its tokens (view_cache.py).
- prefill.onnx: prompt_embeds (1, P, D) -> logits (1, V), k_prompt, v_prompt (layers, 1, kv_heads, P, head_dim)
- step_w{W}_n{n}.onnx: tokens (n, W) int64, k_cache, v_cache (layers, n, kv_heads, T, head_dim),
                start, valid (int64 scalars), bidirectional, action (bool scalars)
                -> logits (n, W, V), k_window, v_window (layers, n, kv_heads, W, head_dim)

- live_{draft|causal}_{shared|action}.onnx (ONNX Runtime): tokens (n, valid) int64, k_prefix, v_prefix
                (layers, n, kv_heads, start, head_dim) -> logits (n, valid, V), k_window, v_window
                (layers, n, kv_heads, valid, head_dim); n, valid and start are dynamic axes.

The static step graphs (TensorRT: one engine, one CUDA graph) are the functional
twin of `Backbone.forward_cached` over the whole cache: the window's K/V are
placed into the attended keys with a position mask (Gather + Where, no
If/Loop/Scan), both FFNs and heads computed and selected by `action`.

The live graphs are what a step needs and nothing more: one graph per kind of
step (draft or causal verify/commit, shared or action section), so only one FFN
and one head run; the runtime passes only the cache prefix that exists, its
length is the block's start position, the token count is the block's length, so
positions and the causal offset come from shapes and a draft has no mask at
all. ONNX has no in-place writes: every step graph hands the window's K/V back
for the runtime to write into its own cache at [start, start + W). The graphs
reuse the model's own modules, so there is one copy of the maths. Everything is
float32; TensorRT lowers precision at build time, `int8.py` quantises for ORT.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from ddrive_ros.model.attention import attend_masked
from ddrive_ros.model.config import N_FRAMES
from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.observation import CAMERAS, PAST_STEPS
from ddrive_ros.runtime.onnx_weights import SHARED_WEIGHTS, share_weights

log = logging.getLogger(__name__)

OPSET = 17
# what the graphs are, beyond the model's config and weights: raised when the exporter writes different
# graphs (2: views/assemble; 3: live graphs without shape arithmetic for the heads), so a cached export
# made by an older exporter is written again instead of served
EXPORT_FORMAT = 3
MAX_IR_VERSION = 10  # TensorRT 10's parser reads up to IR 10
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
EGO_FEATURES = 3 + 2 * PAST_STEPS
# protobuf cannot hold more than 2 GiB; bigger models keep their weights beside the graph
EXTERNAL_DATA_BYTES = 1 << 30

VISION_INPUTS = ("images", "ego", "bos", "nav")
VISION_OUTPUTS = ("visual_tokens", "prompt_embeds")
VIEWS_INPUTS, VIEWS_OUTPUTS = ("images",), ("view_tokens",)
ASSEMBLE_INPUTS, ASSEMBLE_OUTPUTS = ("view_tokens", "ego", "bos", "nav"), ("prompt_embeds",)
PREFILL_INPUTS = ("prompt_embeds",)
PREFILL_OUTPUTS = ("logits", "k_prompt", "v_prompt")
STEP_INPUTS = ("tokens", "k_cache", "v_cache", "start", "valid", "bidirectional", "action")
STEP_OUTPUTS = ("logits", "k_window", "v_window")
LIVE_INPUTS = ("tokens", "k_prefix", "v_prefix")
LIVE_AXES = {"tokens": {0: "rows", 1: "valid"}, "k_prefix": {1: "rows", 3: "start"}, "v_prefix": {1: "rows", 3: "start"},
             "logits": {0: "rows", 1: "valid"}, "k_window": {1: "rows", 3: "valid"}, "v_window": {1: "rows", 3: "valid"}}


def step_graph_name(window: int, rows: int) -> str:
    return f"step_w{window}_n{rows}"


def live_graph_name(causal: bool, action: bool) -> str:
    return f"live_{'causal' if causal else 'draft'}_{'action' if action else 'shared'}"


LIVE_GRAPHS = tuple(live_graph_name(c, a) for c in (False, True) for a in (False, True))
PROMPT_GRAPHS = ("vision", "views", "assemble")


# ---------------------------------------------------------------------------- graph modules
class VisionGraph(nn.Module):
    """Vision encoder plus the prompt assembly (token embeddings, ego encoder): small enough to ride along."""

    def __init__(self, model: DrivingVLA):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor, ego: torch.Tensor, bos: torch.Tensor, nav: torch.Tensor):
        visual = self.model.encode_images(images)
        return visual, self.model.prompt_embeds(visual, ego, bos, nav)


class ViewsGraph(nn.Module):
    """The vision encoder over one frame's camera images, without the camera/frame embedding."""

    def __init__(self, model: DrivingVLA):
        super().__init__()
        self.vision = model.vision

    def forward(self, images: torch.Tensor):
        return self.vision.view_tokens(images)


class AssembleGraph(nn.Module):
    """Per-image tokens of both frames -> the prompt: camera/frame embedding, token embeddings, ego encoder."""

    def __init__(self, model: DrivingVLA):
        super().__init__()
        self.model = model

    def forward(self, view_tokens: torch.Tensor, ego: torch.Tensor, bos: torch.Tensor, nav: torch.Tensor):
        return self.model.prompt_embeds(self.model.vision.place(view_tokens), ego, bos, nav)


class PrefillGraph(nn.Module):
    """Token-causal forward over the prompt; returns the last logit and the prompt's K/V."""

    def __init__(self, model: DrivingVLA):
        super().__init__()
        self.backbone = model.backbone
        self.prompt_len = model.cfg.prompt_len

    def forward(self, x: torch.Tensor):
        bb = self.backbone
        positions = torch.arange(self.prompt_len)
        cos, sin = bb.rope_cos[positions], bb.rope_sin[positions]
        mask = positions[None, :] <= positions[:, None]
        ks, vs = [], []
        for layer in bb.layers:
            q, k, v = layer.attn.project(layer.attn_norm(x), cos, sin)
            x = x + layer.attn.attend(q, k, v, mask)
            x = layer.feed_forward(x, False)
            ks.append(k)
            vs.append(v)
        # logits are per position, so only the last one needs the head
        return bb.logits(x[:, -1:], False)[:, 0], torch.stack(ks), torch.stack(vs)


class StepGraph(nn.Module):
    """Functional block step: reads the cache, returns logits and the window's K/V; mutates nothing."""

    def __init__(self, model: DrivingVLA, window: int):
        super().__init__()
        self.backbone = model.backbone
        self.window = window
        self.cache_len = model.cfg.cache_len(window)

    def forward(self, tokens: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor,
                valid: torch.Tensor, bidirectional: torch.Tensor, action: torch.Tensor):
        bb = self.backbone
        offsets = torch.arange(self.window)
        positions = start + offsets
        # same limit rule as DrivingVLA.step: token-causal, or the block's last real position
        limit = torch.where(bidirectional, (start + valid - 1).expand(self.window), positions)
        keys = torch.arange(self.cache_len)
        mask = keys[None, :] <= limit[:, None]  # (W, T)
        in_window = (keys >= start) & (keys < start + self.window)
        # which window slot each key position reads when it lies in the window (0 elsewhere, masked by Where)
        slot = torch.where(in_window, keys - start, torch.zeros_like(keys))
        place = in_window[:, None]  # broadcasts over (n, kv_heads, T, head_dim)
        cos, sin = bb.rope_at(positions, action)
        x = bb.embed(tokens)
        ks, vs = [], []
        for i, layer in enumerate(bb.layers):
            q, k, v = layer.attn.project(layer.attn_norm(x), cos, sin)
            k_all = torch.where(place, k.index_select(2, slot), k_cache[i].to(k.dtype))
            v_all = torch.where(place, v.index_select(2, slot), v_cache[i].to(v.dtype))
            x = x + layer.attn.attend(q, k_all, v_all, mask)
            x = layer.feed_forward(x, action)
            ks.append(k)
            vs.append(v)
        return bb.logits(x, action), torch.stack(ks), torch.stack(vs)


class LiveStepGraph(nn.Module):
    """One kind of block step over the live keys only: the cache prefix [0, start) and the block itself."""

    def __init__(self, model: DrivingVLA, causal: bool, action: bool):
        super().__init__()
        self.backbone = model.backbone
        self.causal = causal
        self.action = action

    def forward(self, tokens: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor):
        bb = self.backbone
        w = tokens.shape[1]
        start = k_prefix.shape[3]  # the prefix that exists ends where the block starts
        offsets = torch.arange(w)
        positions = start + offsets
        cos, sin = bb.rope_at(positions, self.action)
        mask = None
        if self.causal:  # lower-right causal over prefix + window, from shapes: query i sees keys <= start + i
            mask = torch.arange(start + w)[None, :] <= positions[:, None]
        x = bb.embed(tokens)
        ks, vs = [], []
        for i, layer in enumerate(bb.layers):
            q, k, v = layer.attn.project(layer.attn_norm(x), cos, sin)
            keys = torch.cat([k_prefix[i].to(k.dtype), k], dim=2)
            values = torch.cat([v_prefix[i].to(v.dtype), v], dim=2)
            x = x + layer.attn.out(attend_masked(q, keys, values, mask, layer.attn.shape))
            x = layer.feed_forward(x, self.action)
            ks.append(k)
            vs.append(v)
        return bb.logits(x, self.action), torch.stack(ks), torch.stack(vs)


# ---------------------------------------------------------------------------- example inputs
@dataclass(frozen=True)
class GraphSpec:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]] | None = None


def vision_inputs(model: DrivingVLA, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    cfg = model.cfg
    h, w = cfg.vision.image_size
    n_views = cfg.image_tokens // cfg.vision.tokens_per_image
    images = torch.rand(1, n_views, 3, h, w, generator=generator) * 2 - 1
    ego = torch.randn(1, EGO_FEATURES, generator=generator)
    ids = torch.randint(0, cfg.vocab_size, (2, 1), generator=generator)
    return images, ego, ids[0], ids[1]


def views_inputs(model: DrivingVLA, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    h, w = model.cfg.vision.image_size
    return (torch.rand(len(CAMERAS), 3, h, w, generator=generator) * 2 - 1,)


def assemble_inputs(model: DrivingVLA, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    cfg = model.cfg
    tokens = torch.randn(1, N_FRAMES * len(CAMERAS), cfg.vision.tokens_per_image, cfg.backbone.dim, generator=generator)
    _, ego, bos, nav = vision_inputs(model, generator)
    return tokens, ego, bos, nav


def prefill_inputs(model: DrivingVLA, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, model.cfg.prompt_len, model.cfg.backbone.dim, generator=generator),)


def step_inputs(model: DrivingVLA, window: int, rows: int, generator: torch.Generator | None = None,
                start: int | None = None, valid: int | None = None, bidirectional: bool = True,
                action: bool = False) -> tuple[torch.Tensor, ...]:
    cfg, bb = model.cfg, model.cfg.backbone
    cache_shape = (bb.layers, rows, bb.kv_heads, cfg.cache_len(window), bb.head_dim)
    tokens = torch.randint(0, cfg.vocab_size, (rows, window), generator=generator)
    start = cfg.prompt_len if start is None else start
    valid = window if valid is None else valid
    return (tokens, torch.randn(cache_shape, generator=generator), torch.randn(cache_shape, generator=generator),
            torch.tensor(start), torch.tensor(valid), torch.tensor(bidirectional), torch.tensor(action))


def live_inputs(model: DrivingVLA, rows: int = 2, valid: int = 7, start: int | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    """Example live-step inputs; the traced sizes are distinct so no axis is mistaken for another."""
    cfg, bb = model.cfg, model.cfg.backbone
    start = cfg.prompt_len + 5 if start is None else start
    tokens = torch.randint(0, cfg.vocab_size, (rows, valid), generator=generator)
    shape = (bb.layers, rows, bb.kv_heads, start, bb.head_dim)
    return tokens, torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def graph_specs(model: DrivingVLA, windows: Iterable[int], rows: Iterable[int]) -> list[GraphSpec]:
    gen = torch.Generator().manual_seed(0)
    specs = [GraphSpec("vision", VisionGraph(model), vision_inputs(model, gen), VISION_INPUTS, VISION_OUTPUTS),
             GraphSpec("views", ViewsGraph(model), views_inputs(model, gen), VIEWS_INPUTS, VIEWS_OUTPUTS),
             GraphSpec("assemble", AssembleGraph(model), assemble_inputs(model, gen), ASSEMBLE_INPUTS, ASSEMBLE_OUTPUTS),
             GraphSpec("prefill", PrefillGraph(model), prefill_inputs(model, gen), PREFILL_INPUTS, PREFILL_OUTPUTS)]
    for causal in (False, True):
        for action in (False, True):
            specs.append(GraphSpec(live_graph_name(causal, action), LiveStepGraph(model, causal, action),
                                   live_inputs(model, generator=gen), LIVE_INPUTS, STEP_OUTPUTS, LIVE_AXES))
    for w in sorted(set(windows)):
        for n in sorted(set(rows)):
            specs.append(GraphSpec(step_graph_name(w, n), StepGraph(model, w), step_inputs(model, w, n, gen),
                                   STEP_INPUTS, STEP_OUTPUTS))
    return specs


# ---------------------------------------------------------------------------- checks and hashing
def control_flow_nodes(graph: Any) -> list[str]:
    """Op types of every If/Loop/Scan node, subgraphs included (TensorRT and CUDA graphs want none)."""
    found = []
    for node in graph.node:
        if node.op_type in CONTROL_FLOW_OPS:
            found.append(node.op_type)
        for attr in node.attribute:
            subgraphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
            for sub in subgraphs:
                found.extend(control_flow_nodes(sub))
    return found


def file_sha256(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                digest.update(chunk)
    return digest.hexdigest()


def graph_sha256(path: Path, weights_digest: str) -> str:
    """A graph's identity: its file and the shared weight file it reads (by that file's digest)."""
    digest = hashlib.sha256(weights_digest.encode())
    digest.update(file_sha256([path]).encode())
    return digest.hexdigest()


def weights_sha256(model: nn.Module) -> str:
    """Fingerprint of the weights, so a stale export is never used with other weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def _io_shapes(proto: Any) -> dict[str, dict[str, list]]:
    import onnx

    def describe(values) -> dict[str, Any]:
        out = {}
        for value in values:
            t = value.type.tensor_type
            out[value.name] = {"shape": [d.dim_value for d in t.shape.dim],
                               "dtype": onnx.TensorProto.DataType.Name(t.elem_type).lower()}
        return out

    return {"inputs": describe(proto.graph.input), "outputs": describe(proto.graph.output)}


# ---------------------------------------------------------------------------- export
def export_graph(spec: GraphSpec, path: Path, opset: int = OPSET) -> dict[str, Any]:
    """Trace one graph to ONNX, pin the IR version, check it, and return its manifest entry."""
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    # MultiheadAttention's fused inference path has no ONNX symbolic; the plain path exports
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    # a scratch folder: models over 2 GiB come out of the exporter as one file per weight
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch, warnings.catch_warnings():
        # the tracer warns about every Python int it bakes in; static shapes are the point here
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # the legacy exporter deprecates itself; it is the one that writes plain static graphs (IR <= 10)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            with torch.no_grad():
                torch.onnx.export(spec.module, spec.inputs, str(Path(scratch) / "graph.onnx"), dynamo=False,
                                  opset_version=opset, input_names=list(spec.input_names),
                                  output_names=list(spec.output_names), do_constant_folding=True,
                                  dynamic_axes=spec.dynamic_axes)
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)
        proto = onnx.load(str(Path(scratch) / "graph.onnx"))  # pulls any external weights into memory
    proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
    flow = control_flow_nodes(proto.graph)
    if flow:
        raise RuntimeError(f"{spec.name}: exported graph has control flow {sorted(set(flow))}; static graphs only")
    external = sum(len(t.raw_data) for t in proto.graph.initializer) > EXTERNAL_DATA_BYTES
    data_name = path.name + ".data"
    for stale in (path, path.with_name(data_name)):
        stale.unlink(missing_ok=True)
    onnx.save_model(proto, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=data_name if external else None)
    onnx.checker.check_model(str(path))  # the path form also checks models with external data
    files = [path] + ([path.with_name(data_name)] if external else [])
    return {"file": path.name, "data_file": data_name if external else None, "sha256": file_sha256(files),
            "ir_version": proto.ir_version, **_io_shapes(proto)}


def _progress(items: list, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional (the GPU bench machine has none)
        return items
    return tqdm(items, desc=desc, unit="graph", leave=False)


def export_checkpoint(model: DrivingVLA, windows: Sequence[int], out_dir: str | Path, rows: Sequence[int] = (1,),
                      opset: int = OPSET, progress: bool = True) -> dict[str, Any]:
    """Write vision.onnx (and its two halves views.onnx, assemble.onnx), prefill.onnx, the four live step graphs (ONNX Runtime), one static
    step_w{W}_n{n}.onnx per window and row count (TensorRT), plus manifest.json (shapes, opset, IR version, sha256 per file, model config, weights fingerprint).
    The graphs read their weights from one shared file, each distinct tensor once (`onnx_weights.py`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for w in windows:
        if w > model.cfg.output_len:
            raise ValueError(f"window {w} exceeds the output length {model.cfg.output_len}")
    # export a float32 CPU copy: the caller's model may live on a GPU in bf16
    cpu_model = copy.deepcopy(model).to("cpu", torch.float32).eval()
    specs = graph_specs(cpu_model, windows, rows)
    graphs: dict[str, Any] = {}
    t0 = time.perf_counter()
    for spec in (_progress(specs, "ONNX export") if progress else specs):
        graphs[spec.name] = export_graph(spec, out / f"{spec.name}.onnx", opset)
    shared = share_weights(out, [g["file"] for g in graphs.values()])
    shared["sha256"] = file_sha256([out / SHARED_WEIGHTS])
    import onnx

    for g in graphs.values():
        onnx.checker.check_model(str(out / g["file"]))
        g["data_file"] = SHARED_WEIGHTS
        g["sha256"] = graph_sha256(out / g["file"], shared["sha256"])
    manifest = {
        "export_format": EXPORT_FORMAT,
        "opset": opset,
        "ir_version": max(g["ir_version"] for g in graphs.values()),
        "windows": sorted(set(int(w) for w in windows)),
        "rows": sorted(set(int(n) for n in rows)),
        "model_config": model.cfg.to_dict(),
        "weights_sha256": weights_sha256(cpu_model),
        "torch_version": torch.__version__,
        "graphs": graphs,
        "shared_weights": {"file": SHARED_WEIGHTS, **shared},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    log.info("exported %d ONNX graphs to %s in %.1f s", len(graphs), out, time.perf_counter() - t0)
    return manifest


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    path = Path(out_dir) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def manifest_covers(manifest: dict[str, Any] | None, model: DrivingVLA, windows: Sequence[int],
                    rows: Sequence[int], fingerprint: str | None = None) -> bool:
    """True when an existing export holds every graph needed, for this config and these weights."""
    if manifest is None or manifest.get("model_config") != model.cfg.to_dict():
        return False
    if manifest.get("export_format") != EXPORT_FORMAT:
        return False
    if fingerprint is not None and manifest.get("weights_sha256") != fingerprint:
        return False
    needed = {*PROMPT_GRAPHS, "prefill", *LIVE_GRAPHS} | {step_graph_name(w, n) for w in windows for n in rows}
    return needed <= set(manifest.get("graphs", {}))


def ensure_exported(model: DrivingVLA, windows: Sequence[int], out_dir: str | Path,
                    rows: Sequence[int] = (1,)) -> dict[str, Any]:
    """Reuse an export in out_dir when it matches this model and covers the graphs; else export again."""
    manifest = read_manifest(out_dir)
    fingerprint = weights_sha256(model)
    if manifest_covers(manifest, model, windows, rows, fingerprint):
        return manifest
    if manifest is not None:
        log.info("ONNX export in %s does not match this model or lacks graphs; exporting again", out_dir)
    if manifest is not None and manifest.get("model_config") == model.cfg.to_dict():
        # keep the graphs the earlier export had, so two backends sharing a folder do not evict each other
        windows = sorted(set(windows) | set(manifest.get("windows", [])))
        rows = sorted(set(rows) | set(manifest.get("rows", [])))
    return export_checkpoint(model, windows, out_dir, rows)
