"""CUDA-graph backend: identical tokens to eager on a GPU; a clear refusal without one."""
from __future__ import annotations

import pytest
import torch

from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.model.config import ModelConfig
from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.runtime.cuda_graph_backend import CudaGraphBackend
from ddrive_ros.runtime.factory import make_backend
from ddrive_ros.runtime.torch_backend import TorchBackend
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import Schema
from ddrive_ros.scaffold.tokenizer import Tokenizer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CUDA graphs)")
DECODERS = ["ar", "diffusion", "speculative", "s2d2"]


class Setup:
    def __init__(self, schema_name: str, block_size: int):
        self.schema = Schema.load(schema_name)
        self.tokenizer = Tokenizer.build(self.schema)
        self.ar = Layout(self.schema, self.tokenizer, 1)
        self.main = Layout(self.schema, self.tokenizer, block_size)
        torch.manual_seed(0)
        self.cfg = ModelConfig.load("tiny").with_output(len(self.tokenizer), self.main.length)
        self.state = DrivingVLA(self.cfg).state_dict()

    def model(self) -> DrivingVLA:
        """A fresh copy per backend: backends move their model to their device and dtype."""
        model = DrivingVLA(self.cfg)
        model.load_state_dict(self.state)
        return model.eval()

    def inputs(self):
        gen = torch.Generator().manual_seed(1)
        h, w = self.cfg.vision.image_size
        images = torch.randint(0, 256, (1, 6, h, w, 3), dtype=torch.uint8, generator=gen)
        return images, torch.randn(1, 11, generator=gen), torch.tensor([self.tokenizer.bos_id]), \
            torch.tensor([self.tokenizer.id("<nav:TURN_RIGHT>")])


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup() -> Setup:
    return Setup("fast_ddrive", 32)


def run(backend, layout: Layout, s: Setup, decoder: str, options: DecodeOptions | None = None):
    prompt = backend.prompt(*s.inputs())
    return decode(backend, layout, prompt, make_strategy(decoder), options)


def test_cpu_device_is_refused_with_a_clear_message(setup):
    with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
        CudaGraphBackend(setup.model(), setup.main.window, device="cpu", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
        make_backend("cuda_graph", setup.model(), setup.main.window, device="cpu")


@pytest.mark.parametrize("decoder", ["speculative"])
def test_static_buffer_path_gives_eager_tokens_without_graphs(setup, decoder):
    """graphs=False runs the same static-buffer calls the graphs capture: the CPU check of that plumbing."""
    layout = setup.main
    options = DecodeOptions(rollouts=2, rollout_temperature=0)
    static = CudaGraphBackend(setup.model(), layout.window, 2, device="cpu", dtype=torch.float32, graphs=False)
    eager = TorchBackend(setup.model(), layout.window, 2)
    ids, stats = run(static, layout, setup, decoder, options)
    ref, ref_stats = run(eager, layout, setup, decoder, options)
    assert torch.equal(ids, ref)
    assert stats.forwards == ref_stats.forwards


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("decoder", DECODERS)
def test_every_decoder_gives_eager_tokens_with_cuda_graphs(setup, decoder, dtype):
    layout = setup.ar if decoder == "ar" else setup.main
    graphs = CudaGraphBackend(setup.model(), layout.window, 3, device="cuda", dtype=dtype)
    eager = TorchBackend(setup.model(), layout.window, 3, device="cuda", dtype=dtype)
    for _ in range(2):  # the second plan replays graphs captured during the first
        ids, stats = run(graphs, layout, setup, decoder)
        ref, ref_stats = run(eager, layout, setup, decoder)
        assert torch.equal(ids, ref)
        assert stats.forwards == ref_stats.forwards


@needs_cuda
@pytest.mark.gpu
def test_multi_rollout_gives_eager_tokens_with_cuda_graphs(setup):
    layout = setup.main
    options = DecodeOptions(rollouts=3, rollout_temperature=0)
    graphs = CudaGraphBackend(setup.model(), layout.window, 3, device="cuda", dtype=torch.float32)
    eager = TorchBackend(setup.model(), layout.window, 3, device="cuda", dtype=torch.float32)
    ids, _ = run(graphs, layout, setup, "speculative", options)
    ref, _ = run(eager, layout, setup, "speculative", options)
    assert ids.shape[0] == 3 and torch.equal(ids, ref)


def test_warmup_captures_every_step_shape_a_plan_uses(setup):
    """After warm-up a plan only replays: no step shape is left to capture during a plan."""
    layout = setup.main
    backend = CudaGraphBackend(setup.model(), layout.window, 2, device="cpu", dtype=torch.float32, graphs=False)
    captured = backend.warmup(layout, rollouts=2)
    assert captured == 2 * len(layout.blocks)  # draft and causal per block
    steps = {k for k in backend.calls if k[0] == "step"}
    for decoder in ("speculative", "diffusion", "s2d2"):
        run(backend, layout, setup, decoder, DecodeOptions(rollouts=2, rollout_temperature=0))
        assert {k for k in backend.calls if k[0] == "step"} == steps, decoder


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[needs_cuda, pytest.mark.gpu])])
def test_tree_verification_on_the_static_buffer_path_gives_eager_tokens(device):
    """Tree verification's K-row forwards on the whole-block static path (what CUDA graphs capture; on the
    CPU without graphs): the shipped trajectory_only model's AR tokens and eager's forward count."""
    from ddrive_ros import checkpoint as ckpt

    bundle = ckpt.load("trajectory_only_tiny", device=device)
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    ar_layout = Layout(bundle.schema, bundle.tokenizer, 1)
    g = torch.Generator().manual_seed(3)
    h, w = bundle.config.vision.image_size
    inputs = (torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8).to(device),
              torch.randn(1, 11, generator=g).to(device), torch.tensor([bundle.tokenizer.bos_id], device=device),
              torch.tensor([bundle.tokenizer.id("<nav:FOLLOW_LANE>")], device=device))
    static = CudaGraphBackend(bundle.model, layout.window, 16, device=device, dtype=torch.float32,
                              graphs=device == "cuda")
    eager = TorchBackend(bundle.model, layout.window, 16, device=device)
    ar_backend = TorchBackend(bundle.model, ar_layout.window, 1, device=device)
    ar, _ = decode(ar_backend, ar_layout, ar_backend.prompt(*inputs), make_strategy("ar"))
    for depth in (1, 2):
        strategy = make_strategy("speculative", tree=16, tree_depth=depth)
        ids, stats = decode(static, layout, static.prompt(*inputs), strategy)
        ref, ref_stats = decode(eager, layout, eager.prompt(*inputs), strategy)
        assert torch.equal(ids, ar) and torch.equal(ref, ar), depth
        assert stats.forwards == ref_stats.forwards and stats.tree_forwards > 0, depth
