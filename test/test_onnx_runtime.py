"""ONNX export and the ONNX Runtime backend against the PyTorch eager reference (CPU, real ONNX Runtime)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

pytest.importorskip("onnxruntime")

from ddrive_ros.checkpoint import first_action_position  # noqa: E402
from ddrive_ros.decoding.block_loop import DecodeOptions, decode  # noqa: E402
from ddrive_ros.decoding.strategies import make_strategy  # noqa: E402
from ddrive_ros.model.config import ModelConfig  # noqa: E402
from ddrive_ros.model.vla import DrivingVLA  # noqa: E402
from ddrive_ros.runtime.factory import make_backend  # noqa: E402
from ddrive_ros.runtime.onnx_backend import OnnxBackend, SplitCache  # noqa: E402
from ddrive_ros.runtime.onnx_export import (LIVE_GRAPHS, MAX_IR_VERSION, PROMPT_GRAPHS, control_flow_nodes,  # noqa: E402
                                            export_checkpoint, file_sha256, graph_sha256, live_graph_name, live_inputs,
                                            prefill_inputs, step_graph_name, step_inputs, vision_inputs)
from ddrive_ros.runtime.torch_backend import TorchBackend  # noqa: E402
from ddrive_ros.scaffold.layout import Layout  # noqa: E402
from ddrive_ros.scaffold.schema import Schema  # noqa: E402
from ddrive_ros.scaffold.tokenizer import Tokenizer  # noqa: E402

ROWS = 3
MAIN_BLOCK = {"fast_ddrive": 32, "trajectory_only": 16, "fast_ddrive_bins": 32}
SHIFTED = "@trajectory_after_prompt"  # a variant: the trajectory at rotary positions right after the prompt
TOL = 1e-4


class Exported:
    def __init__(self, name: str, out: Path):
        schema_name = name.removesuffix(SHIFTED)
        self.schema = Schema.load(schema_name)
        self.tokenizer = Tokenizer.build(self.schema)
        self.ar = Layout(self.schema, self.tokenizer, 1)
        self.main = Layout(self.schema, self.tokenizer, MAIN_BLOCK[schema_name])
        torch.manual_seed(0)
        cfg = ModelConfig.load("tiny").with_output(len(self.tokenizer), self.main.length)
        if name.endswith(SHIFTED):
            cfg = dataclasses.replace(cfg, action_rope_shift=first_action_position(self.main))
        self.model = DrivingVLA(cfg).eval()
        self.dir = out
        self.manifest = export_checkpoint(self.model, [self.ar.window, self.main.window], out, rows=[1, ROWS],
                                          progress=False)

    def inputs(self):
        gen = torch.Generator().manual_seed(1)
        h, w = self.model.cfg.vision.image_size
        images = torch.randint(0, 256, (1, 6, h, w, 3), dtype=torch.uint8, generator=gen)
        ego = torch.randn(1, 11, generator=gen)
        nav = torch.tensor([self.tokenizer.id("<nav:TURN_LEFT>")])
        return images, ego, torch.tensor([self.tokenizer.bos_id]), nav


_EXPORTS: dict[str, Exported] = {}


pytestmark = pytest.mark.usefixtures("one_thread")


def export_once(schema_name: str, tmp_path_factory) -> Exported:
    """Exports take seconds: each schema is exported once per test session."""
    if schema_name not in _EXPORTS:
        _EXPORTS[schema_name] = Exported(schema_name, tmp_path_factory.mktemp(schema_name))
    return _EXPORTS[schema_name]


@pytest.fixture(scope="module", params=["fast_ddrive", "trajectory_only", "fast_ddrive_bins" + SHIFTED])
def exported(request, tmp_path_factory) -> Exported:
    return export_once(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def fast(tmp_path_factory) -> Exported:
    return export_once("fast_ddrive", tmp_path_factory)


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Exported:
    return export_once("trajectory_only", tmp_path_factory)


def session(ex: Exported, graph: str):
    import onnxruntime as ort

    path = ex.dir / ex.manifest["graphs"][graph]["file"]
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


# ---------------------------------------------------------------------------- the files
def test_export_writes_checked_graphs_with_a_manifest(exported):
    manifest = json.loads((exported.dir / "manifest.json").read_text())
    expected = {*PROMPT_GRAPHS, "prefill", *LIVE_GRAPHS} | {step_graph_name(w, n) for w in (exported.ar.window,
                                                                                      exported.main.window)
                                                       for n in (1, ROWS)}
    assert set(manifest["graphs"]) == expected
    assert manifest["opset"] == 17 and manifest["ir_version"] <= MAX_IR_VERSION
    assert manifest["model_config"] == exported.model.cfg.to_dict()
    for name, entry in manifest["graphs"].items():
        path = exported.dir / entry["file"]
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto)
        assert proto.ir_version <= MAX_IR_VERSION, name
        assert control_flow_nodes(proto.graph) == [], name
        assert graph_sha256(path, manifest["shared_weights"]["sha256"]) == entry["sha256"]
        assert entry["data_file"] == "weights.bin"
        dims = {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
                for value in proto.graph.input}
        if name in LIVE_GRAPHS:  # rows, block length and prefix length are dynamic axes, the rest static
            bb = exported.model.cfg.backbone
            assert dims["tokens"] == ["rows", "valid"], (name, dims)
            assert dims["k_prefix"] == [bb.layers, "rows", bb.kv_heads, "start", bb.head_dim], (name, dims)
        else:  # static shapes only (TensorRT, CUDA graphs)
            assert all(isinstance(d, int) and d > 0 for shape in dims.values() for d in shape), (name, dims)


def test_graphs_share_one_weight_file_with_each_tensor_once(exported):
    """The backbone is in the prefill, the four live and every static step graph: stored once."""
    manifest = json.loads((exported.dir / "manifest.json").read_text())
    shared = manifest["shared_weights"]
    assert shared["sha256"] == file_sha256([exported.dir / "weights.bin"])
    assert (exported.dir / "weights.bin").stat().st_size >= shared["shared_bytes"]
    assert shared["initializer_bytes_before"] > 4 * shared["shared_bytes"]  # 9 graphs, 1 copy
    backbone = sum(p.numel() * 4 for n, p in exported.model.named_parameters() if not n.startswith("vision"))
    assert shared["shared_bytes"] < 1.5 * backbone + 4 * sum(p.numel() for p in exported.model.vision.parameters())
    for entry in manifest["graphs"].values():  # graph files hold structure, not weights
        assert (exported.dir / entry["file"]).stat().st_size < 0.1 * shared["shared_bytes"]
    assert not list(exported.dir.glob("*.onnx.data"))


def test_control_flow_walk_finds_nodes_inside_subgraphs():
    then = onnx.helper.make_graph([onnx.helper.make_node("Loop", ["a", "b"], ["c"])], "then", [], [])
    node = onnx.helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=onnx.helper.make_graph([], "e", [], []))
    graph = onnx.helper.make_graph([node], "g", [], [])
    assert sorted(control_flow_nodes(graph)) == ["If", "Loop"]


def test_large_models_keep_their_weights_in_a_data_file_beside_the_graph(fast, tmp_path, monkeypatch):
    import onnxruntime as ort

    from ddrive_ros.runtime import onnx_export

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 0)
    spec = next(s for s in onnx_export.graph_specs(fast.model, [], []) if s.name == "prefill")
    entry = onnx_export.export_graph(spec, tmp_path / "prefill.onnx")
    assert entry["data_file"] == "prefill.onnx.data" and (tmp_path / "prefill.onnx.data").stat().st_size > 1e6
    assert (tmp_path / "prefill.onnx").stat().st_size < 1e6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prefill.onnx", "prefill.onnx.data"]
    (prompt,) = spec.inputs
    logits, _, _ = ort.InferenceSession(str(tmp_path / "prefill.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"prompt_embeds": prompt.numpy()})
    with torch.no_grad():
        assert max_diff(logits, spec.module(prompt)[0]) < TOL


# ---------------------------------------------------------------------------- graph parity
def test_vision_graph_matches_pytorch(fast):
    images, ego, bos, nav = vision_inputs(fast.model, torch.Generator().manual_seed(3))
    visual, prompt = session(fast, "vision").run(None, {"images": images.numpy(), "ego": ego.numpy(),
                                                         "bos": bos.numpy(), "nav": nav.numpy()})
    with torch.no_grad():
        ref_visual = fast.model.encode_images(images)
        ref_prompt = fast.model.prompt_embeds(ref_visual, ego, bos, nav)
    assert max_diff(visual, ref_visual) < TOL
    assert max_diff(prompt, ref_prompt) < TOL


def test_views_and_assemble_graphs_give_the_vision_graphs_prompt(fast):
    """The two halves ONNX Runtime runs (per-frame view tokens, then the prompt) equal the one graph."""
    images, ego, bos, nav = vision_inputs(fast.model, torch.Generator().manual_seed(5))
    _, whole = session(fast, "vision").run(None, {"images": images.numpy(), "ego": ego.numpy(),
                                                   "bos": bos.numpy(), "nav": nav.numpy()})
    views = session(fast, "views")
    per_frame = [views.run(None, {"images": images[0, f * 3:(f + 1) * 3].numpy()})[0] for f in range(2)]
    tokens = np.concatenate(per_frame)[None]
    with torch.no_grad():
        ref = fast.model.vision.view_tokens(images[0])
    assert max_diff(tokens[0], ref) < TOL
    (prompt,) = session(fast, "assemble").run(None, {"view_tokens": tokens, "ego": ego.numpy(), "bos": bos.numpy(),
                                                     "nav": nav.numpy()})
    assert max_diff(prompt, whole) < TOL


def test_backend_reuses_a_frame_seen_before_bit_for_bit(fast):
    """A stream's history frame was an earlier plan's current frame: the backend encodes it once, and
    the prompt is the same bytes as with nothing kept."""
    backend = OnnxBackend(fast.dir, fast.main.window)
    h, w = fast.model.cfg.vision.image_size
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (3, h, w, 3), dtype=np.uint8) for _ in range(3)]
    ego = torch.zeros(1, 3 + 2 * 4)
    bos, nav = torch.tensor([1]), torch.tensor([2])

    def prompt(history, current):
        return backend.prompt(torch.from_numpy(np.concatenate([history, current]))[None], ego, bos, nav).numpy()

    prompt(frames[0], frames[1])
    assert (backend.view_cache.hits, backend.view_cache.misses) == (0, 2)
    reused = prompt(frames[1], frames[2])  # the last current frame is now the history frame
    assert (backend.view_cache.hits, backend.view_cache.misses) == (1, 3)
    backend.view_cache.clear()
    fresh = prompt(frames[1], frames[2])
    assert backend.view_cache.misses == 5
    assert np.array_equal(reused, fresh)


def test_prefill_graph_matches_pytorch(fast):
    (prompt,) = prefill_inputs(fast.model, torch.Generator().manual_seed(4))
    logits, k, v = session(fast, "prefill").run(None, {"prompt_embeds": prompt.numpy()})
    cache = fast.model.new_cache(1, fast.main.window)
    with torch.no_grad():
        ref = fast.model.prefill(prompt, cache.rows(1))
    p = prompt.shape[1]
    assert max_diff(logits, ref) < TOL
    assert max_diff(k, cache.k[:, :, :, :p]) < TOL
    assert max_diff(v, cache.v[:, :, :, :p]) < TOL


@pytest.mark.parametrize("rows", [1, ROWS])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("action", [False, True])
def test_step_graph_matches_pytorch(fast, rows, bidirectional, action):
    w = fast.main.window
    start = fast.model.cfg.prompt_len + 40
    valid = w - 5  # a padded block: the limit of a bidirectional window is its last real position
    feeds = step_inputs(fast.model, w, rows, torch.Generator().manual_seed(5), start, valid, bidirectional, action)
    names = ["tokens", "k_cache", "v_cache", "start", "valid", "bidirectional", "action"]
    logits, k_win, v_win = session(fast, step_graph_name(w, rows)).run(None, {n: t.numpy() for n, t in zip(names, feeds)})
    tokens, k_cache, v_cache = feeds[:3]
    cache = fast.model.new_cache(rows, w)
    cache.k.copy_(k_cache)
    cache.v.copy_(v_cache)
    with torch.no_grad():
        ref = fast.model.step(tokens, feeds[3], feeds[4], bidirectional, cache.rows(rows), action)
    assert max_diff(logits, ref) < TOL
    assert max_diff(k_win, cache.k[:, :, :, start:start + w]) < TOL
    assert max_diff(v_win, cache.v[:, :, :, start:start + w]) < TOL


@pytest.mark.parametrize("rows", [1, ROWS])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("action", [False, True])
def test_live_step_graph_matches_pytorch_on_the_live_keys_only(fast, rows, causal, action):
    """One graph per kind of step; the prefix length is the block start, the token count its length."""
    w = fast.main.window
    start, valid = fast.model.cfg.prompt_len + 40, w - 5
    gen = torch.Generator().manual_seed(6)
    tokens, k_prefix, v_prefix = live_inputs(fast.model, rows, valid, start, gen)
    logits, k_win, v_win = session(fast, live_graph_name(causal, action)).run(
        None, {"tokens": tokens.numpy(), "k_prefix": k_prefix.numpy(), "v_prefix": v_prefix.numpy()})
    cache = fast.model.new_cache(rows, w)
    cache.k[:, :, :, :start] = k_prefix
    cache.v[:, :, :, :start] = v_prefix
    with torch.no_grad():
        ref = fast.model.step(tokens, start, valid, not causal, cache.rows(rows), action)
    assert logits.shape == (rows, valid, fast.model.cfg.vocab_size)
    assert max_diff(logits, ref) < TOL
    assert max_diff(k_win, cache.k[:, :, :, start:start + valid]) < TOL
    assert max_diff(v_win, cache.v[:, :, :, start:start + valid]) < TOL
    # the graph holds only the head (and FFNs) of its kind: the other head's weights are not in it
    proto = onnx.load(str(fast.dir / fast.manifest["graphs"][live_graph_name(causal, action)]["file"]))
    weights = [onnx.numpy_helper.to_array(init) for init in proto.graph.initializer]
    bb = fast.model.backbone

    def holds(w: torch.Tensor) -> bool:
        w = w.detach().numpy()
        return any(x.shape == s.shape and np.allclose(x, s) for x in weights for s in (w, w.T))

    used, unused = (bb.action_head, bb.head) if action else (bb.head, bb.action_head)
    assert holds(used.weight) and not holds(unused.weight)
    ffn_used, ffn_unused = (bb.layers[0].action_ffn, bb.layers[0].ffn) if action else (bb.layers[0].ffn,
                                                                                         bb.layers[0].action_ffn)
    assert holds(ffn_used.down.weight) and not holds(ffn_unused.down.weight)


def test_int8_backend_quantises_once_and_stays_close_to_fp32(short, tmp_path):
    import shutil

    folder = tmp_path / "export"
    shutil.copytree(short.dir, folder)
    layout = short.main
    int8 = OnnxBackend(folder, layout.window, 1, threads=1, int8=True)
    quantised = sorted(p.name for p in folder.glob("*.int8.onnx"))
    assert quantised == sorted(f"{g}.int8.onnx" for g in ["prefill", *LIVE_GRAPHS])
    ops = {node.op_type for node in onnx.load(str(folder / "live_draft_action.int8.onnx")).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    stamp = (folder / "prefill.int8.onnx").stat().st_mtime_ns
    OnnxBackend(folder, layout.window, 1, threads=1, int8=True)
    assert (folder / "prefill.int8.onnx").stat().st_mtime_ns == stamp  # reused, not quantised again
    fp32 = OnnxBackend(folder, layout.window, 1, threads=1)
    prompt = fp32.prompt(*short.inputs())
    a, b = fp32.prefill(prompt), int8.prefill(prompt)
    assert 0 < max_diff(a, b) < 0.1 * float(a.abs().max())  # quantised: different numbers, same scale
    ids, stats = run_decoder(int8, layout, short, "speculative")
    assert torch.as_tensor(layout.allowed).gather(1, ids.T).all() and stats.tokens_decided == layout.editable_count()


# ---------------------------------------------------------------------------- decoding parity
def run_decoder(backend, layout: Layout, ex: Exported, decoder: str, options: DecodeOptions | None = None):
    prompt = backend.prompt(*ex.inputs())
    ids, stats = decode(backend, layout, prompt, make_strategy(decoder), options)
    return ids, stats


@pytest.mark.parametrize("decoder", ["ar", "diffusion", "speculative", "s2d2"])
def test_every_decoder_gives_identical_tokens_on_onnx_runtime(exported, decoder):
    layout = exported.ar if decoder == "ar" else exported.main
    ort_ids, ort_stats = run_decoder(OnnxBackend(exported.dir, layout.window, ROWS, threads=1), layout, exported, decoder)
    ref_ids, ref_stats = run_decoder(TorchBackend(exported.model, layout.window, ROWS), layout, exported, decoder)
    assert torch.equal(ort_ids, ref_ids)
    assert ort_stats.forwards == ref_stats.forwards


def test_multi_rollout_gives_identical_tokens_on_onnx_runtime(exported):
    layout = exported.main
    options = DecodeOptions(rollouts=3, rollout_temperature=0)
    ort_ids, _ = run_decoder(OnnxBackend(exported.dir, layout.window, ROWS, threads=1), layout, exported, "speculative", options)
    ref_ids, _ = run_decoder(TorchBackend(exported.model, layout.window, ROWS), layout, exported, "speculative", options)
    assert ort_ids.shape[0] == 3
    assert torch.equal(ort_ids, ref_ids)


@pytest.mark.parametrize("decoder", ["speculative", "s2d2"])
def test_io_binding_keeps_the_cache_in_torch_and_gives_the_same_plans(exported, decoder):
    """I/O binding (the cache a torch tensor on the provider's device, bound by pointer; on a GPU it
    never passes through the host) runs the same graphs on the same inputs: the same logits bit for
    bit, so the same tokens and forwards, greedy, sampled and over sampled rollouts."""
    layout = exported.main
    for options in (DecodeOptions(), DecodeOptions(temperature=1.0, rollouts=3, rollout_temperature=0.7, seed=4)):
        bound = OnnxBackend(exported.dir, layout.window, ROWS, threads=1, io_binding=True)
        plain = OnnxBackend(exported.dir, layout.window, ROWS, threads=1)
        b_ids, b_stats = run_decoder(bound, layout, exported, decoder, options)
        p_ids, p_stats = run_decoder(plain, layout, exported, decoder, options)
        assert torch.equal(b_ids, p_ids) and b_stats.forwards == p_stats.forwards
        k_bound, _, _ = bound.cache.use(ROWS)
        k_plain, _, _ = plain.cache.use(ROWS)
        assert isinstance(k_bound, torch.Tensor) and np.array_equal(k_bound.numpy(), k_plain)


def test_fewer_rollouts_than_cache_rows(short):
    """Two rollouts on a 3-row backend: the live graphs take any row count, the cache store has 3."""
    layout = short.main
    options = DecodeOptions(rollouts=2, rollout_temperature=0)
    ort_ids, _ = run_decoder(OnnxBackend(short.dir, layout.window, ROWS, threads=1), layout, short, "diffusion", options)
    ref_ids, _ = run_decoder(TorchBackend(short.model, layout.window, ROWS), layout, short, "diffusion", options)
    assert torch.equal(ort_ids, ref_ids)


# ---------------------------------------------------------------------------- pieces
def test_split_cache_carries_row_zero_into_the_wide_store_and_back():
    cache = SplitCache([1, 3], lambda r: (np.zeros((2, r, 1, 5, 1)), np.zeros((2, r, 1, 5, 1))))
    k, v, rows = cache.use(1)
    k[:, 0, :, :4] = 7.0
    cache.fork(3, 3)
    k3, _, rows3 = cache.use(3)
    assert rows3 == 3 and (k3[:, :, :, :3] == 7.0).all() and (k3[:, 1:, :, 3] == 0.0).all()
    k3[:, 0, :, 4] = 9.0
    k1, _, _ = cache.use(1)
    assert (k1[:, 0, :, 4] == 9.0).all()
    with pytest.raises(ValueError, match="raise max rollouts"):
        cache.use(4)


def test_backend_refuses_a_folder_without_the_needed_graphs(fast, tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        OnnxBackend(tmp_path, fast.main.window)
    old = tmp_path / "old_export"  # an export made before the live graphs existed
    old.mkdir()
    manifest = json.loads((fast.dir / "manifest.json").read_text())
    manifest["graphs"] = {k: v for k, v in manifest["graphs"].items() if k not in LIVE_GRAPHS}
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="lacks graphs"):
        OnnxBackend(old, fast.main.window)


def test_factory_reuses_a_matching_export_and_redoes_a_stale_one(fast, tmp_path):
    out = tmp_path / "onnx"
    backend = make_backend("onnx", fast.model, fast.main.window, max_rows=1, onnx_dir=out, threads=1)
    assert backend.name == "onnx"
    stamp = (out / "prefill.onnx").stat().st_mtime_ns
    make_backend("onnx", fast.model, fast.main.window, max_rows=1, onnx_dir=out, threads=1)
    assert (out / "prefill.onnx").stat().st_mtime_ns == stamp  # reused
    manifest = json.loads((out / "manifest.json").read_text())  # an export an older exporter wrote
    (out / "manifest.json").write_text(json.dumps({**manifest, "export_format": manifest["export_format"] - 1}))
    make_backend("onnx", fast.model, fast.main.window, max_rows=1, onnx_dir=out, threads=1)
    assert (out / "prefill.onnx").stat().st_mtime_ns != stamp
    stamp = (out / "prefill.onnx").stat().st_mtime_ns
    other = DrivingVLA(fast.model.cfg).eval()  # same config, other weights
    make_backend("onnx", other, fast.main.window, max_rows=1, onnx_dir=out, threads=1)
    assert (out / "prefill.onnx").stat().st_mtime_ns != stamp
    assert make_backend("torch", fast.model, fast.main.window).name == "torch"
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("tpu", fast.model, fast.main.window)


def test_the_fast_cpu_image_conversion_gives_the_torch_floats_bit_for_bit():
    from ddrive_ros.runtime.torch_backend import images_to_input

    images = torch.randint(0, 256, (1, 6, 12, 20, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    images[0, 0, 0, 0] = torch.tensor([0, 255, 128], dtype=torch.uint8)
    fast = images_to_input(images, torch.float32)
    slow = (images.permute(0, 1, 4, 2, 3).to(torch.float32) / 127.5) - 1.0
    assert fast.shape == (1, 6, 3, 12, 20) and fast.is_contiguous()
    assert torch.equal(fast, slow)
    assert torch.equal(images_to_input(images, torch.float64), (images.permute(0, 1, 4, 2, 3).double() / 127.5) - 1.0)
