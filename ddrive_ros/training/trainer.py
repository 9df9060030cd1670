"""Training loop: dual-stream loss, progressive block-size curriculum, AdamW with warm-up and
cosine decay, gradient clipping, resumable safetensors checkpoints, a loss-curve PNG, and
data-parallel training under torchrun (gloo on CPU, nccl on GPU)."""
from __future__ import annotations

import copy
import fnmatch
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.augment import CameraAugment
from ddrive_ros.training.config_keys import from_checked_dict
from ddrive_ros.training.dataset import TensorData, batch_prompts
from ddrive_ros.training.distributed import average_gradients, broadcast_weights, finish, init_ranks
from ddrive_ros.training.context_swap import swap_context
from ddrive_ros.training.losses import DualStreamLoss
from ddrive_ros.training.perturb import RepairSpec, perturbed_ids
from ddrive_ros.training.prefix_noise import PrefixNoise
from ddrive_ros.training.self_targets import with_self_targets

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    model: str = "tiny"
    schema: str = "fast_ddrive"
    out: str = "models/fast_ddrive_tiny"
    steps: int = 1000
    batch_size: int = 8
    lr: float = 1e-3
    min_lr: float = 5e-5
    warmup: int = 50
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    curriculum: list[list[float]] = field(default_factory=lambda: [[1, 0.1], [4, 0.1], [8, 0.1], [16, 0.2], [32, 0.5]])
    distill_weight: float = 0.0  # > 0: JS distillation from the previous stage's (smaller-block) model
    bin_sigma: float = 0.0  # > 0: Gaussian ordinal soft targets over bin tokens (sigma in bins)
    seed: int = 0
    save_every: int = 200
    data: dict[str, Any] | list[dict[str, Any]] = field(default_factory=lambda: {"source": "world", "seed": 0, "episodes": 40})
    threads: int = 0
    init: str = ""  # start from this checkpoint's weights (fine-tuning) instead of a random model
    transfer: str = ""  # start from another schema's checkpoint where its weights fit (training/transfer.py)
    repair: float = 0.0  # fraction of batch rows trained to repair a perturbed trajectory (AutoEdit)
    repair_spec: dict[str, Any] = field(default_factory=dict)  # RepairSpec fields (training/perturb.py)
    repair_only: bool = False  # train on the repair term alone (no plain AR / diffusion loss)
    repair_own: float = 0.0  # fraction of repair rows whose input is the model's own draft, not a perturbation
    repair_temperature: float = 1.0  # sampling temperature of those drafts (0: argmax)
    trainable: list[str] = field(default_factory=list)  # fnmatch patterns of parameter names to train; empty: all
    anneal: list[float] = field(default_factory=list)  # [from_fraction, to_sigma]: bin_sigma -> to_sigma linearly from there
    balance: float = 0.0  # 0: uniform sampling; 1: every navigation command equally often; between: a mix
    balance_by: str = "nav"  # what `balance` evens out: "nav" (the command) or a one-token label field, e.g. future_meta_behavior.lateral
    surprise: float = 0.0  # share of sampling weight proportional to a sample's constant-velocity surprise (m)
    surprise_cap: float = 8.0  # metres: surprise above this weighs as this (a few outliers must not dominate)
    brake: float = 0.0  # share of sampling weight proportional to the share of its speed a sample's future sheds
    start: float = 0.0  # share of sampling weight proportional to how much a standing ego's future gets going
    recover: float = 0.0  # share of sampling weight proportional to how much a braking ego's future drives on
    ema: float = 0.0  # > 0: exponential moving average of the weights with this decay; the EMA weights are saved
    augment: dict[str, float] = field(default_factory=dict)  # camera augmentation (training/augment.py)
    context_swap: float = 0.0  # fraction of rows whose context_swap_sections come from another row (context_swap.py)
    context_swap_sections: list[str] = field(default_factory=lambda: ["explanation"])
    context_swap_exclusive: bool = False  # later sections learn only in swapped rows (context_swap.py)
    section_weights: dict[str, float] = field(default_factory=dict)  # section name -> loss weight, instead of the schema's
    ego_accel: bool | None = None  # does the model read the ego's acceleration (model config)? None: the init's / model's
    # share of batch rows that learn the starting model's own greedy trajectory, the draft's input fully masked
    # (training/self_targets.py: a draft that agrees with its verifier)
    self_targets: float = 0.0
    # probability that each bin token the causal stream reads is moved by 1..prefix_noise_bins bins, its target kept
    # (training/prefix_noise.py: a verifier that does not copy a draft's error into its next draft)
    prefix_noise: float = 0.0
    prefix_noise_bins: int = 3
    # a new model's trajectory at rotary positions right after the prompt (ModelConfig.action_rope_shift); an init
    # checkpoint keeps its own
    action_after_prompt: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        return from_checked_dict(cls, d, "training config")


def select_trainable(model: torch.nn.Module, patterns: list[str]) -> list[torch.nn.Parameter]:
    """The parameters to train: all, or those whose names match one of `patterns` (the rest frozen).
    A pattern that matches nothing is an error (a typo would otherwise train nothing it names)."""
    if not patterns:
        return list(model.parameters())
    named = dict(model.named_parameters())
    for pat in patterns:
        if not any(fnmatch.fnmatchcase(name, pat) for name in named):
            raise ValueError(f"trainable pattern {pat!r} matches no parameter; names look like {sorted(named)[:4]}")
    chosen = []
    for name, p in named.items():
        p.requires_grad_(any(fnmatch.fnmatchcase(name, pat) for pat in patterns))
        if p.requires_grad:
            chosen.append(p)
    log.info("training %d of %d parameter tensors (%d of %d weights)", len(chosen), len(named),
             sum(p.numel() for p in chosen), sum(p.numel() for p in named.values()))
    return chosen


def bin_sigma_at(step: int, cfg: TrainConfig) -> float:
    """The soft-target width at a step: cfg.bin_sigma, then (with `anneal`) linearly to its target by the end."""
    if not cfg.anneal:
        return cfg.bin_sigma
    if len(cfg.anneal) != 2 or not 0.0 <= cfg.anneal[0] < 1.0 or cfg.anneal[1] < 0:
        raise ValueError(f"anneal must be [from_fraction in [0, 1), to_sigma >= 0], got {cfg.anneal}")
    start = cfg.anneal[0] * cfg.steps
    if step < start:
        return cfg.bin_sigma
    u = (step - start) / max(1.0, cfg.steps - 1 - start)
    return float(cfg.bin_sigma + (cfg.anneal[1] - cfg.bin_sigma) * min(1.0, u))


def sampling_weights(nav: torch.Tensor, balance: float, surprise: torch.Tensor | None = None,
                     surprise_share: float = 0.0, surprise_cap: float = 8.0, slowdown: torch.Tensor | None = None,
                     brake_share: float = 0.0, pull_away: torch.Tensor | None = None,
                     start_share: float = 0.0, recovery: torch.Tensor | None = None,
                     recover_share: float = 0.0) -> torch.Tensor | None:
    """Per-sample weights, a mix of distributions: uniform (1 - the other shares), equal
    weight per navigation command (balance: turns and lane changes are about a fifth of the data and
    would otherwise be seen rarely), proportional to each sample's constant-velocity surprise in
    metres, capped at `surprise_cap` (surprise_share: curve starts, stop-sign approaches and braking
    lead vehicles, where the future is not the present motion held), and proportional to the share of
    its speed the future sheds (brake_share, `dataset.brake_share`: closing on a queue or a stop line,
    the states where the learned planner rear-ends, bench/collision_kinds.py), and proportional to how much a
    standing ego's future gets going (start_share, `dataset.start_share`: pulling away from a stop line or a queue,
    where it stays put), and proportional to how much a braking ego's future drives on (recover_share,
    `dataset.recover_share`: braked by a repair for a road user that has gone, where it carries its braking on).
    None: uniform."""
    shares = {"balance": balance, "surprise": surprise_share, "brake": brake_share, "start": start_share,
              "recover": recover_share}
    if any(not 0 <= v <= 1 for v in shares.values()) or sum(shares.values()) > 1:
        raise ValueError(f"sampling shares {shares} must each be in [0, 1] and sum to <= 1")
    if sum(shares.values()) == 0:
        return None
    n = nav.numel()
    w = torch.full((n,), (1.0 - sum(shares.values())) / n, dtype=torch.float64)
    if balance > 0:
        _, inverse, counts = torch.unique(nav, return_inverse=True, return_counts=True)
        per_class = 1.0 / (counts.numel() * counts.double())
        w += balance * per_class[inverse]
    if surprise_share > 0:
        w += surprise_share * _proportional(surprise, n, surprise_cap, "surprise",
                                            "every sample follows constant velocity exactly")
    if brake_share > 0:
        w += brake_share * _proportional(slowdown, n, 1.0, "brake", "no sample's future slows down")
    if start_share > 0:
        w += start_share * _proportional(pull_away, n, 1.0, "start", "no standing sample's future gets going")
    if recover_share > 0:
        w += recover_share * _proportional(recovery, n, 1.0, "recover", "no braking sample's future drives on")
    return w


def _proportional(values: torch.Tensor | None, n: int, cap: float, name: str, why_empty: str) -> torch.Tensor:
    """Weights proportional to per-sample values clamped to [0, cap], summing to 1."""
    if values is None or values.numel() != n:
        raise ValueError(f"{name} sampling needs one {name} value per sample (TensorData)")
    v = values.double().clamp(0.0, cap)
    if float(v.sum()) <= 0:
        raise ValueError(f"{name} sampling: {why_empty} (all values 0)")
    return v / v.sum()


def balance_key(data: TensorData, layout: Layout, by: str) -> torch.Tensor:
    """(N,) the class each sample is balanced by: its navigation command, or its label in a one-token field
    (samples without that label form a class of their own, -1). A field that is not one token is an error."""
    if by == "nav":
        return data.nav
    slots = [i for i, slot in enumerate(layout.slots) if slot is not None and slot.field == by]
    if len(slots) != 1:
        fields = sorted({slot.field for slot in layout.slots if slot is not None and slot.group.startswith("enum:")})
        raise ValueError(f"balance_by {by!r} must be 'nav' or a one-token field of schema {layout.schema.name!r}: {fields}")
    pos = slots[0]
    return torch.where(data.labelled[:, pos], data.ids[:, pos], torch.full_like(data.ids[:, pos], -1))


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def stage_boundaries(cfg: TrainConfig) -> list[tuple[int, int]]:
    """(first step, block size) of each curriculum stage."""
    fractions = [f for _, f in cfg.curriculum]
    total = sum(fractions)
    out, start = [], 0
    for bs, f in cfg.curriculum:
        out.append((start, int(bs)))
        start += round(cfg.steps * f / total)
    return out


def block_size_at(step: int, stages: list[tuple[int, int]]) -> int:
    return [bs for s, bs in stages if s <= step][-1]


def _state_path(out: Path) -> Path:
    return out / "train_state"


def save_state(out: Path, bundle: ckpt.Bundle, opt: torch.optim.Optimizer, step: int, history: list[dict]) -> None:
    sd = _state_path(out)
    sd.mkdir(parents=True, exist_ok=True)
    ckpt.save(bundle, sd)
    tensors = {}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{i}.{k}"] = v.detach().cpu().contiguous()
    save_file(tensors, str(sd / "optimizer.safetensors"))
    (sd / "progress.json").write_text(json.dumps({"step": step, "history": history}))


def load_state(out: Path, bundle: ckpt.Bundle, opt: torch.optim.Optimizer) -> tuple[int, list[dict]]:
    sd = _state_path(out)
    if not (sd / "progress.json").is_file():
        return 0, []
    saved = ckpt.load(sd)
    bundle.model.load_state_dict(saved.model.state_dict())
    tensors = load_file(str(sd / "optimizer.safetensors"))
    state = opt.state_dict()
    for key, v in tensors.items():
        i, k = key.split(".", 1)
        state["state"].setdefault(int(i), {})[k] = v
    opt.load_state_dict(state)
    progress = json.loads((sd / "progress.json").read_text())
    log.info("resumed from %s at step %d", sd, progress["step"])
    return int(progress["step"]), progress["history"]


def train(cfg: TrainConfig, data: TensorData, bundle: ckpt.Bundle | None = None, resume: bool = True,
          progress: bool = True) -> tuple[ckpt.Bundle, list[dict]]:
    ranks = init_ranks()
    rank, device = ranks.rank, ranks.device
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    bundle = bundle or ckpt.build_random(cfg.model, cfg.schema, block_size=int(cfg.curriculum[-1][0]), seed=cfg.seed)
    model = bundle.model.to(device).train()
    opt = torch.optim.AdamW(select_trainable(model, cfg.trainable), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    out = Path(cfg.out)
    start, history = (load_state(out, bundle, opt) if resume else (0, []))
    broadcast_weights(model, ranks)  # same start everywhere; gradients are averaged after each backward
    stages = stage_boundaries(cfg)
    repair_spec = RepairSpec.from_dict(cfg.repair_spec)
    repair_rng = np.random.default_rng(cfg.seed * 7919 + rank)
    losses: dict[int, DualStreamLoss] = {}
    prefix_noise: dict[int, PrefixNoise] = {}
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + rank)
    teacher = None
    current_bs = None
    bar = tqdm(range(start, cfg.steps), desc=f"train {cfg.schema}", disable=not progress or rank != 0, initial=start,
               total=cfg.steps)
    weights = sampling_weights(balance_key(data, Layout(bundle.schema, bundle.tokenizer), cfg.balance_by), cfg.balance,
                               data.surprise, cfg.surprise, cfg.surprise_cap, data.slowdown, cfg.brake,
                               data.pull_away, cfg.start, data.recovery, cfg.recover)
    for values, what in ((data.slowdown, "shed over half their speed"), (data.pull_away, "pull away from standing"),
                         (data.recovery, "brake now and their future drives on")):
        if weights is not None and values is not None:
            chosen = values > 0.5
            log.info("sampling: %d of %d samples %s; they get %.1f%% of the draws (uniform: %.1f%%)", int(chosen.sum()),
                     len(data), what, 100.0 * float(weights[chosen].sum()), 100.0 * float(chosen.float().mean()))
    if not 0.0 <= cfg.self_targets <= 1.0:
        raise ValueError(f"self_targets must be a share of rows in [0, 1], got {cfg.self_targets}")
    augment = CameraAugment.from_dict(cfg.augment)
    ema = {n: p.detach().clone() for n, p in model.named_parameters()} if cfg.ema > 0 else None
    t0 = time.time()
    for step in bar:
        bs = block_size_at(step, stages)
        if bs != current_bs:
            if current_bs is not None and cfg.distill_weight > 0:
                teacher = (copy.deepcopy(model).eval(), losses[current_bs])
            current_bs = bs
        if bs not in losses:
            losses[bs] = DualStreamLoss(Layout(bundle.schema, bundle.tokenizer, bs), bundle.config.prompt_len, device,
                                        cfg.bin_sigma, cfg.section_weights)
        losses[bs].set_bin_sigma(bin_sigma_at(step, cfg))
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        if weights is None:
            idx = torch.randint(0, len(data), (cfg.batch_size,), generator=gen)
        else:
            idx = torch.multinomial(weights, cfg.batch_size, replacement=True, generator=gen)
        images, ego, nav, ids, labelled = (t.to(device) for t in data.batch(idx))
        if cfg.context_swap > 0:
            ids, labelled, _ = swap_context(ids, labelled, losses[bs].layout, cfg.context_swap_sections,
                                            cfg.context_swap, gen, cfg.context_swap_exclusive)
        if augment is not None:
            images = augment(images, gen)
        draft_rows = None
        if cfg.self_targets > 0:
            draft_rows = torch.rand(ids.shape[0], generator=gen).to(device) < cfg.self_targets
            ids = with_self_targets(ids, labelled, data.self_batch(idx).to(device), losses[bs].trajectory, draft_rows)
        prompt = batch_prompts(model, images, ego, nav, bundle.tokenizer.bos_id)
        repair_ids = None
        if cfg.repair > 0:
            rows = torch.from_numpy(repair_rng.random(ids.shape[0]) < cfg.repair)
            codec = Codec(losses[bs].layout)
            repair_ids = torch.full_like(ids, -1)
            own = rows & torch.from_numpy(repair_rng.random(ids.shape[0]) < cfg.repair_own)
            made = rows & ~own
            if made.any():
                repair_ids[made] = perturbed_ids(ids[made].cpu(), codec, repair_spec, repair_rng).to(ids.device)
            if own.any():
                repair_ids[own] = losses[bs].own_drafts(model, prompt[own], ids[own], labelled[own], gen,
                                                        cfg.repair_temperature)
        clean_input = None
        if cfg.prefix_noise > 0:
            if bs not in prefix_noise:
                prefix_noise[bs] = PrefixNoise(losses[bs].layout)
            clean_input = prefix_noise[bs](ids, labelled, cfg.prefix_noise, cfg.prefix_noise_bins, gen)
        parts = losses[bs](model, prompt, ids, labelled, gen, teacher, cfg.distill_weight, repair_ids, cfg.repair_only,
                           draft_rows, clean_input)
        opt.zero_grad(set_to_none=True)
        parts.total.backward()
        average_gradients(model, ranks)
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        opt.step()
        if ema is not None:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    ema[n].lerp_(p.detach(), 1.0 - cfg.ema)
        history.append({"step": step, "block_size": bs, "loss": float(parts.total.detach()), "ar": parts.ar,
                        "diffusion": parts.diffusion, "distill": parts.distill, "repair": parts.repair,
                        "lr": lr_at(step, cfg), "bin_sigma": losses[bs].bin_sigma})
        bar.set_postfix(bs=bs, loss=f"{float(parts.total.detach()):.3f}")
        if rank == 0 and cfg.save_every and (step + 1) % cfg.save_every == 0:
            save_state(out, bundle, opt, step + 1, history)
    if ema is not None:  # the averaged weights are the model
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(ema[n])
    if rank == 0:
        log.info("trained %d steps in %.0f s", cfg.steps - start, time.time() - t0)
    finish(ranks)
    model.eval()
    return bundle, history


def plot_losses(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in ("loss", "ar", "diffusion", "repair"):
        if not any(h.get(key) for h in history):
            continue
        vals = torch.tensor([h.get(key, 0.0) for h in history])
        k = max(1, len(vals) // 50)
        smooth = torch.nn.functional.avg_pool1d(vals[None, None], k, 1, 0)[0, 0] if len(vals) > k else vals
        ax.plot(steps[: len(smooth)], smooth.tolist(), label=key)
    for s, bs in {(h["step"], h["block_size"]) for h in history if h["step"] == 0 or h["block_size"] != history[max(0, h["step"] - 1 - steps[0])]["block_size"]}:
        ax.axvline(s, color="grey", lw=0.5)
        ax.text(s, ax.get_ylim()[1], f"B={bs}", fontsize=7, va="top")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("dual-stream training loss (block-size curriculum)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
