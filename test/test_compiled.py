"""The torch.compile path keeps the exactness guarantees (minutes of compilation on 2 CPU cores: slow)."""
from __future__ import annotations

import copy

import pytest
import torch

from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.reference import ReferenceBackend
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.runtime.factory import make_backend
from ddrive_ros.scaffold.layout import Layout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.usefixtures("one_thread")]


def inputs(bundle):
    g = torch.Generator().manual_seed(0)
    h, w = bundle.config.vision.image_size
    images = torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8)
    tok = bundle.tokenizer
    return images, torch.randn(1, 11, generator=g), torch.tensor([tok.bos_id]), torch.tensor([tok.id("<nav:TURN_LEFT>")])


def plan(bundle, backend, decoder, options=None):
    layout = Layout(bundle.schema, bundle.tokenizer, 1 if decoder == "ar" else bundle.schema.default_block_size)
    prompt = backend.prompt(*inputs(bundle))
    return decode(backend, layout, prompt, make_strategy(decoder), options)[0]


def test_compiled_step_equals_the_uncached_reference_and_speculative_equals_ar(tiny_traj):
    layout = Layout(tiny_traj.schema, tiny_traj.tokenizer, tiny_traj.schema.default_block_size)
    ar_layout = Layout(tiny_traj.schema, tiny_traj.tokenizer, 1)
    compiled = make_backend("torch", copy.deepcopy(tiny_traj.model), layout.window, max_rows=2, compile=True)
    compiled_ar = make_backend("torch", copy.deepcopy(tiny_traj.model), ar_layout.window, compile=True)
    reference = ReferenceBackend(copy.deepcopy(tiny_traj.model), layout.window, max_rows=2)
    options = DecodeOptions(rollouts=2, rollout_temperature=1.0, seed=4)
    assert torch.equal(plan(tiny_traj, compiled, "speculative", options), plan(tiny_traj, reference, "speculative", options))
    assert torch.equal(plan(tiny_traj, compiled, "speculative"), plan(tiny_traj, compiled_ar, "ar"))
