"""The decode loop decides on the device: sampling on every backend there is, and at most one
host read per iteration (two for S2D2, whose routing decides whether to verify)."""
from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from ddrive_ros.decoding import sampling
from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.runtime.factory import make_backend
from ddrive_ros.scaffold.layout import Layout

pytestmark = pytest.mark.usefixtures("one_thread")

HAS_CUDA = torch.cuda.is_available()
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
# (backend, device, dtype, why it may be missing)
BACKENDS = [
    pytest.param("torch", "cpu", torch.float32, id="torch-cpu"),
    pytest.param("onnx", "cpu", torch.float32, id="onnx-cpu",
                 marks=pytest.mark.skipif(not HAS_ORT, reason="onnxruntime not installed")),
    pytest.param("torch", "cuda", torch.bfloat16, id="torch-cuda",
                 marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")),
    pytest.param("cuda_graph", "cuda", torch.bfloat16, id="cuda_graph",
                 marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")),
    pytest.param("tensorrt", "cuda", torch.float16, id="tensorrt",
                 marks=pytest.mark.skipif(not (HAS_CUDA and HAS_TRT), reason="needs CUDA and tensorrt")),
]
SAMPLED = DecodeOptions(temperature=1.0, rollouts=3, rollout_temperature=1.0, seed=7)


def inputs(bundle, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, w = bundle.config.vision.image_size
    images = torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8)
    tok = bundle.tokenizer
    return images, torch.randn(1, 11, generator=g), torch.tensor([tok.bos_id]), torch.tensor([tok.id("<nav:FOLLOW_LANE>")])


def sampled_plan(bundle, backend, layout, decoder, seed):
    prompt = backend.prompt(*inputs(bundle))
    ids, stats = decode(backend, layout, prompt, make_strategy(decoder),
                        DecodeOptions(SAMPLED.temperature, SAMPLED.rollouts, SAMPLED.rollout_temperature, seed))
    return ids.cpu(), stats


@pytest.mark.parametrize("name,device,dtype", BACKENDS)
@pytest.mark.parametrize("decoder", ["speculative", "s2d2", "diffusion"])
def test_sampled_decoding_and_rollouts_run_on_every_backend(tiny_traj, tmp_path_factory, name, device, dtype, decoder):
    bundle = tiny_traj
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.schema.default_block_size)
    opts = {"onnx_dir": tmp_path_factory.getbasetemp() / "sampled_onnx"} if name in ("onnx", "tensorrt") else {}
    backend = make_backend(name, copy.deepcopy(bundle.model), layout.window, max_rows=SAMPLED.rollouts,
                           device=device, dtype=dtype, **opts)
    ids, stats = sampled_plan(bundle, backend, layout, decoder, seed=7)
    again, _ = sampled_plan(bundle, backend, layout, decoder, seed=7)
    other, _ = sampled_plan(bundle, backend, layout, decoder, seed=8)
    assert ids.shape == (SAMPLED.rollouts, layout.length)
    allowed = torch.as_tensor(layout.allowed)
    assert allowed.gather(1, ids.T).all(), "a sampled token outside its position's allowed set"
    assert torch.equal(ids, again), "same seed, same backend: the plan must repeat"
    assert not torch.equal(ids, other), "another seed should sample another plan (random weights, T=1)"
    assert stats.tokens_decided == SAMPLED.rollouts * layout.editable_count()  # one section: all forked
    assert not all(torch.equal(row, ids[0]) for row in ids), "rollouts at T=1 should differ"
    if name == "onnx":  # same CPU generator stream and logits within 1e-5 of eager: the same samples
        ref = make_backend("torch", copy.deepcopy(bundle.model), layout.window, max_rows=SAMPLED.rollouts)
        ref_ids, _ = sampled_plan(bundle, ref, layout, decoder, seed=7)
        assert torch.equal(ids, ref_ids)


# ---------------------------------------------------------------------------- host reads
SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


class HostReads:
    """Counts every Tensor method that copies a device value to the host (the calls that block on a GPU)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for method in SYNC_METHODS:
            original = getattr(torch.Tensor, method)
            monkeypatch.setattr(torch.Tensor, method, self._counting(original))

    def _counting(self, original):
        def wrapper(tensor, *args, **kwargs):
            self.count += 1
            return original(tensor, *args, **kwargs)

        return wrapper


class CountIterations:
    def __init__(self, inner):
        self.inner, self.name, self.iterations = inner, inner.name, 0

    def begin_block(self, ctx):
        self.inner.begin_block(ctx)

    def step(self, ctx):
        self.iterations += 1
        self.inner.step(ctx)


@pytest.mark.parametrize("fixture", ["tiny_fast", "tiny_traj"])
@pytest.mark.parametrize("decoder,knobs,per_iteration", [
    ("ar", {}, 1), ("diffusion", {}, 1), ("diffusion", {"steps": 3, "tau": 1.01}, 1), ("speculative", {}, 1),
    ("s2d2", {"policy": "score"}, 2)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_loop_reads_the_device_at_most_once_per_iteration(request, monkeypatch, fixture, decoder, knobs,
                                                              per_iteration, temperature):
    bundle = request.getfixturevalue(fixture)
    layout = Layout(bundle.schema, bundle.tokenizer, 1 if decoder == "ar" else bundle.schema.default_block_size)
    backend = make_backend("torch", bundle.model, layout.window, max_rows=2)
    prompt = backend.prompt(*inputs(bundle))
    options = DecodeOptions(temperature=temperature, rollouts=2, rollout_temperature=max(temperature, 0.5), seed=3)
    decode(backend, layout, prompt, make_strategy(decoder, **knobs), options)  # builds the per-schema masks once
    strategy = CountIterations(make_strategy(decoder, **knobs))
    # count the path a GPU runs: on CPU tensors greedy choices go through numpy (no device to sync with)
    monkeypatch.setattr(sampling, "NUMPY_ON_CPU", False)
    reads = HostReads(monkeypatch)
    ids, stats = decode(backend, layout, prompt, strategy, options)
    monkeypatch.undo()
    traj = layout.schema.section_names.index("trajectory")
    assert stats.tokens_decided == layout.editable_count() + layout.editable_count(traj)  # 2 rows after the fork
    assert reads.count <= per_iteration * strategy.iterations, (reads.count, strategy.iterations)
    if decoder == "ar":  # block size 1: tokens come from the carried logit, with no iteration and no read,
        # except where a section opens with scaffold (its first value needs one causal forward of its own)
        assert strategy.iterations <= len(layout.schema.sections)


def test_greedy_choices_on_the_cpu_are_the_torch_argmax_ties_included():
    """The numpy path CPU tensors take (no dispatch overhead) picks what the device path picks."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 16, 50, generator=g).round(decimals=1)  # rounding makes ties common
    allowed = torch.rand(16, 50, generator=g) < 0.6
    bias = sampling.allowed_bias(allowed)
    fast = sampling.greedy_choice(logits, bias)
    sampling.NUMPY_ON_CPU = False
    try:
        slow = sampling.greedy_choice(logits, bias)
    finally:
        sampling.NUMPY_ON_CPU = True
    assert fast.dtype == slow.dtype == torch.int64
    assert torch.equal(fast, slow)
