"""Prefix noise (training/prefix_noise.py): only labelled bin tokens move, by 1..bins bins inside their
coordinate's range; the causal stream reads the moved tokens and is still scored on the true ones."""
from __future__ import annotations

import pytest
import torch

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.dataset import tensorize
from ddrive_ros.training.prefix_noise import PrefixNoise


@pytest.fixture(scope="module")
def data():
    from ddrive_ros.sim.sample import samples_from_world

    bundle = ckpt.load("trajectory_only_tiny")
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    samples = list(samples_from_world(55, 2, duration_s=8.0, stride_s=1.0, progress=False))
    return bundle, layout, tensorize(samples, Codec(layout), bundle.config)


def test_only_labelled_bins_move_by_at_most_the_bins_asked_and_stay_in_range(data):
    _, layout, d = data
    noise = PrefixNoise(layout)
    gen = torch.Generator().manual_seed(0)
    labelled = d.labelled.clone()
    labelled[0] = False  # an unlabelled row keeps every token
    moved = noise(d.ids, labelled, 0.5, 3, gen)
    changed = moved != d.ids
    assert not changed[0].any()
    assert not changed[:, noise.count == 0].any()  # the scaffold never moves
    bins = noise.count > 0
    share = changed[1:][:, bins].float().mean()
    assert 0.3 < share < 0.7, share  # about p of the bin tokens, a few clamped at a range's edge
    shift = (noise.index[moved] - noise.index[d.ids])[changed]
    assert shift.abs().min() >= 1 and shift.abs().max() <= 3
    assert ((noise.index[moved][:, bins] >= 0) & (noise.index[moved][:, bins] < noise.count[bins][None])).all()
    assert torch.equal(noise(d.ids, d.labelled, 0.0, 3, gen), d.ids)
    with pytest.raises(ValueError, match="probability"):
        noise(d.ids, d.labelled, 1.5, 3, gen)


def test_the_causal_stream_reads_the_noise_and_learns_the_truth(data):
    from ddrive_ros.runtime.torch_backend import images_to_input
    from ddrive_ros.training.losses import DualStreamLoss

    bundle, layout, d = data
    images, ego, nav, ids, labelled = d.batch(torch.arange(len(d)))
    model = bundle.model
    loss = DualStreamLoss(layout, bundle.config.prompt_len)
    with torch.no_grad():
        prompt = model.prompt_embeds(model.encode_images(images_to_input(images, torch.float32)), ego,
                                     torch.full_like(nav, bundle.tokenizer.bos_id), nav)
        plain = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0))
        same = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), clean_input=ids)
        moved = PrefixNoise(layout)(ids, labelled, 1.0, 5, torch.Generator().manual_seed(1))
        noisy = loss(model, prompt, ids, labelled, torch.Generator().manual_seed(0), clean_input=moved)
    assert abs(plain.ar - same.ar) < 1e-6
    # a trained model that reads a prefix 1-5 bins off predicts the true tokens worse than from the true prefix
    assert noisy.ar > plain.ar + 0.05, (plain.ar, noisy.ar)
    assert abs(noisy.diffusion - plain.diffusion) < 1e-6  # the draft's stream reads what it read before


def test_a_schema_without_bins_is_refused():
    bundle = ckpt.build_random("tiny", "fast_ddrive")
    with pytest.raises(ValueError, match="bin tokens"):
        PrefixNoise(Layout(bundle.schema, bundle.tokenizer, 32))
