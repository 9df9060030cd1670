"""The model's own greedy plan as a training target, so its one-forward draft learns what its verifier says.

Why: scaffold speculative decoding keeps the longest prefix of the draft that equals the AR argmax. The draft is
the diffusion stream's guess of every trajectory token at once, trained on the expert's future; the verifier is
the causal stream's argmax, which walks its own path from its first choices. Where the two disagree by a 0.1 m
bin, the verification confirms about one waypoint per forward (docs/training.md, "why speculative decoding stops
near 2x"). Training the draft on the AR greedy path itself (self-distillation, as consistency training does for
Jacobi decoding) aims the draft at the only thing it is judged on.

What: before training, `greedy_ids` decodes every training sample with the starting weights (speculative, whose
greedy tokens are AR's) and keeps the ids; `TrainConfig.self_targets` is the share of batch rows whose trajectory
targets are those ids, with the noisy stream's trajectory fully masked (the draft's input at inference). The
other rows keep the expert's future, so the causal stream still learns from the truth. Decoding stays exact
whatever the weights: greedy plans equal AR's of the new model, which is why only the forward count and the
plans' quality need measuring.
"""
from __future__ import annotations

import copy

import torch
from tqdm import tqdm

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.decoding import logit_bias
from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.runtime.factory import make_backend
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.dataset import TensorData


def greedy_ids(bundle: ckpt.Bundle, data: TensorData, block_size: int, progress: bool = True) -> torch.Tensor:
    """(N, L) the bundle's greedy plan of every sample of `data`, in the layout at `block_size`: the shared
    sections and the trajectory as the planner decodes them (the checkpoint's calibrated logit bias included).
    The bundle's weights are copied, so training the bundle afterwards does not touch what was decoded."""
    model = copy.deepcopy(bundle.model).eval()
    layout = Layout(bundle.schema, bundle.tokenizer, block_size)
    if layout.length != data.ids.shape[1]:
        raise ValueError(f"self targets: the layout at block size {block_size} has {layout.length} positions, "
                         f"the training ids {data.ids.shape[1]}")
    backend = make_backend("torch", model, window=layout.window)
    strategy = make_strategy("speculative")
    bias = logit_bias.entries(layout, logit_bias.parse(bundle.calibration.get("logit_bias", {}), "logit_bias"))
    options = DecodeOptions(logit_bias=bias)
    bos = torch.tensor([bundle.tokenizer.bos_id])
    out = torch.empty_like(data.ids)
    for i in tqdm(range(len(data)), desc="self targets (greedy plans)", disable=not progress):
        prompt = backend.prompt(data.images[i:i + 1], data.ego[i:i + 1], bos, data.nav[i:i + 1])
        ids, _ = decode(backend, layout, prompt, strategy, options)
        out[i] = ids[0].to(out.device)
    return out


def with_self_targets(ids: torch.Tensor, labelled: torch.Tensor, self_ids: torch.Tensor, trajectory: torch.Tensor,
                      rows: torch.Tensor) -> torch.Tensor:
    """`ids` whose labelled trajectory positions in `rows` (B,) hold `self_ids`; `trajectory` (L,) marks the
    trajectory's editable positions."""
    where = rows[:, None] & trajectory[None] & labelled
    return torch.where(where, self_ids, ids)
