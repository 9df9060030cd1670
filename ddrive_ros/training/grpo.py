"""RL fine-tuning on the closed-loop score, GRPO-style.

Each iteration the current planner drives fresh closed-loop episodes with N sampled rollouts per plan
(the rollouts fork the shared prompt's KV cache); every rollout is driven 4 s in a fork of the world
with the other road users reacting and scored by the closed loop's PDM scorer (`sim/rl_groups.py`).
Rewards are normalised within each group, and the trajectory tokens' policy is updated with PPO's
clipped ratio and a KL penalty to the supervised model the run started from.

The policy is the causal (verifier) stream. Speculative decoding samples exactly from it (the
acceptance rule keeps the AR distribution), so a rollout's log-probability is exact, one teacher-forced
forward: sum_i log softmax(logits_i / T)[id_i] over the trajectory's editable tokens, with the allowed-
token constraint the decoder applies. The diffusion (draft) stream is trained on the policy's own
samples (`draft_weight`), so drafts keep agreeing with the verifier as the policy moves and
speculative decoding keeps its speed; the plan itself is decided by the verifier.

    ddrive rl --config config/rl/trajectory_only_tiny.yaml
"""
from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.model.vla import DrivingVLA
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.training.config_keys import from_checked_dict
from ddrive_ros.training.dataset import batch_prompts, observation_tensors
from ddrive_ros.training.distributed import Ranks, agree_min, average_gradients, broadcast_weights, finish, init_ranks
from ddrive_ros.training.losses import DualStreamLoss
from ddrive_ros.training.noise import corrupt
from ddrive_ros.training.trainer import select_trainable

log = logging.getLogger(__name__)

NEG = -1e9


@dataclass
class RLConfig:
    init: str = "models/trajectory_only_tiny"  # the supervised model: the start and the KL reference
    out: str = "/tmp/rl_model"
    iterations: int = 8
    episodes: int = 8  # closed-loop episodes collected per iteration (per rank)
    seed: int = 21  # episode seeds derive from it (never an evaluation seed)
    rollouts: int = 4  # group size: sampled plans per state
    temperature: float = 0.5  # sampling temperature of the rollouts and of the policy's log-probabilities
    epochs: int = 2  # passes over an iteration's groups
    batch_groups: int = 8  # groups per gradient step
    lr: float = 5e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    clip: float = 0.2  # PPO ratio clip
    kl: float = 0.05  # weight of the KL penalty to the supervised model (k3 estimator, per token)
    adv_floor: float = 0.05  # advantage = (r - group mean) / max(group std, adv_floor)
    draft_weight: float = 0.5  # diffusion-stream cross-entropy on the policy's own samples
    trainable: list[str] = field(default_factory=list)  # fnmatch patterns; empty: all weights
    threads: int = 1
    plan_hz: float = 5.0
    latency_ms: float = 200.0
    duration_s: float = 8.0
    tail_s: float = 0.0  # > 0: after each rollout's 4 s the expert drives on this long in its fork, inside the score
    val_episodes: int = 0  # > 0: the deployed (greedy) planner drives these fixed episodes before and after each iteration
    val_seed: int = 31  # their seeds derive from it (a training-side seed, never an evaluation seed)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RLConfig":
        return from_checked_dict(cls, d, "rl config")


def advantages(rewards: np.ndarray, floor: float) -> np.ndarray:
    """(G, N) rewards -> group-normalised advantages; `floor` keeps a group whose rollouts differ by
    a hair (a few centimetres of progress) from being blown up to the same weight as a collision."""
    mean = rewards.mean(1, keepdims=True)
    std = rewards.std(1, keepdims=True)
    return (rewards - mean) / np.maximum(std, floor)


@dataclass
class StepParts:
    total: torch.Tensor
    pg: float
    kl: float
    draft: float
    clipped: float  # fraction of tokens whose ratio was clipped


class GrpoLoss:
    """The clipped policy-gradient loss over trajectory tokens, the KL to the reference, the draft term."""

    def __init__(self, layout: Layout, prompt_len: int, temperature: float, clip: float, kl: float,
                 draft_weight: float):
        self.streams = DualStreamLoss(layout, prompt_len)
        self.layout = layout
        self.p = prompt_len
        self.length = layout.length
        self.temperature = temperature
        self.clip, self.kl, self.draft_weight = clip, kl, draft_weight
        self.select = self.streams.trajectory  # (L,) editable trajectory positions: the policy's actions
        if not bool(self.select.any()):
            raise ValueError(f"schema {layout.schema.name} has no editable trajectory tokens to train")

    def _policy(self, logits: torch.Tensor) -> torch.Tensor:
        """Causal-stream logits over prompt+output (B, P+L(+L), V) -> (B, L, V) log-probabilities of
        each output position given the ones before it, at T, over the allowed tokens."""
        pred = logits[:, self.p - 1:self.p + self.length - 1].float()
        return torch.log_softmax(pred.masked_fill(~self.streams.allowed[None], NEG) / self.temperature, -1)

    def policy(self, model: DrivingVLA, prompt: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """(B, L, V): the policy at every output position, teacher-forced on `ids` (one causal forward)."""
        t = self.p + self.length
        s = self.streams
        return self._policy(model.forward_full(prompt, ids, s.mask[:, :t, :t], s.action[:t], s.positions[:t]))

    def logprobs(self, model: DrivingVLA, prompt: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) per-token log-probabilities of `ids` under the model's policy."""
        return self.policy(model, prompt, ids).gather(-1, ids[..., None])[..., 0]

    def __call__(self, model: DrivingVLA, prompt: torch.Tensor, ids: torch.Tensor, adv: torch.Tensor,
                 old: torch.Tensor, ref: torch.Tensor, generator: torch.Generator) -> StepParts:
        """prompt (B, P, D), ids (B, L), adv (B,), old / ref (B, L) token log-probs of the behaviour
        policy and the reference."""
        s = self.streams
        sel = self.select[None].expand_as(ids)
        draft = torch.zeros(())
        if self.draft_weight > 0:
            noisy, masked = corrupt(ids, sel, self.layout, s.mask_id, generator)
            logits = model.forward_full(prompt, torch.cat([ids, noisy], 1), s.mask, s.action, s.positions)
            draft = s.ce(logits[:, self.p + self.length - 1:self.p + 2 * self.length - 1], ids, masked & s.diffusable[None])
        else:
            t = self.p + self.length
            logits = model.forward_full(prompt, ids, s.mask[:, :t, :t], s.action[:t], s.positions[:t])
        new = self._policy(logits).gather(-1, ids[..., None])[..., 0]
        ratio = torch.exp(new - old)
        a = adv[:, None]
        pg = -torch.minimum(ratio * a, ratio.clamp(1 - self.clip, 1 + self.clip) * a)
        d = ref - new
        kl = torch.exp(d) - d - 1.0
        w = sel.float()
        per_row = ((pg + self.kl * kl) * w).sum(1) / w.sum(1).clamp_min(1.0)
        total = per_row.mean() + self.draft_weight * draft
        clipped = ((ratio - 1).abs() > self.clip).float()
        n = w.sum().clamp_min(1.0)
        return StepParts(total, float((pg.detach() * w).sum() / n), float((kl.detach() * w).sum() / n), float(draft.detach()),
                         float((clipped * w).sum() / n))


def _collect(bundle: ckpt.Bundle, cfg: RLConfig, iteration: int, ranks: Ranks, progress: bool):
    from ddrive_ros.planner import Planner, PlannerOptions
    from ddrive_ros.sim.closed_loop_run import LoopOptions
    from ddrive_ros.sim.rl_groups import collect_groups

    # logit_bias={}: the groups are sampled from the raw policy the clipped ratio is computed on (a
    # checkpoint's decode-time calibration would make them off-policy)
    planner = Planner(bundle, PlannerOptions(rollouts=cfg.rollouts, rollout_temperature=cfg.temperature,
                                             temperature=0.0, seed=1000 * iteration + ranks.rank, logit_bias={}))
    opts = LoopOptions(duration_s=cfg.duration_s, plan_hz=cfg.plan_hz, latency_ms=cfg.latency_ms)
    seed = cfg.seed * 100_003 + iteration * ranks.world + ranks.rank
    return collect_groups(planner, seed, cfg.episodes, opts, progress=progress and ranks.rank == 0, tail_s=cfg.tail_s)


def validate(bundle: ckpt.Bundle, cfg: RLConfig) -> dict:
    """Closed-loop row of the planner as deployed (greedy speculative) on the fixed validation episodes:
    the same episodes every iteration, so the curve shows the policy, not the episodes' difficulty."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.closed_loop_run import LoopOptions, run_methods
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.sample import episode_seeds

    planner = Planner(bundle)
    opts = LoopOptions(duration_s=cfg.duration_s, plan_hz=cfg.plan_hz, latency_ms=cfg.latency_ms)
    results = run_methods({"greedy": lambda w: ModelDriver(planner, planner.restart_sampling).bind(w)},
                          episode_seeds(cfg.val_seed, cfg.val_episodes), opts, progress=False)
    return next(r for r in results if r.method == "greedy").row()


def train_rl(cfg: RLConfig, progress: bool = True) -> tuple[ckpt.Bundle, list[dict]]:
    """Run the RL iterations from `cfg.init`; returns the trained bundle and one history row per iteration."""
    ranks = init_ranks()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    bundle = ckpt.load(cfg.init)
    model = bundle.model
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    broadcast_weights(model, ranks)
    layout = Layout(bundle.schema, bundle.tokenizer, bundle.config.block_size)
    loss = GrpoLoss(layout, bundle.config.prompt_len, cfg.temperature, cfg.clip, cfg.kl, cfg.draft_weight)
    opt = torch.optim.AdamW(select_trainable(model, cfg.trainable), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + ranks.rank)
    tok = bundle.tokenizer
    history: list[dict] = []
    val0 = validate(bundle, cfg) if cfg.val_episodes and ranks.rank == 0 else None
    if val0 is not None:
        log.info("rl validation before training: PDMS %.3f, %.2f at-fault collisions per km", val0["pdms"],
                 val0["at_fault_collisions_per_km"])
    for it in range(cfg.iterations):
        t0 = time.time()
        groups, runs = _collect(bundle, cfg, it, ranks, progress)
        t_collect = time.time() - t0
        rewards = np.stack([g.rewards for g in groups])
        adv = advantages(rewards, cfg.adv_floor)
        spread = rewards.std(1) > 1e-9  # a group whose rollouts all score the same teaches nothing
        row = {"iteration": it, "groups": len(groups), "groups_with_spread": int(spread.sum()),
               "reward_mean": float(rewards.mean()), "reward_best_of_group": float(rewards.max(1).mean()),
               "driven_pdms": float(np.mean([r.score.pdms for r in runs])),
               "driven_at_fault_collisions": int(sum(r.score.at_fault_collisions for r in runs)),
               "driven_episodes": len(runs), "collect_s": t_collect}
        keep = np.flatnonzero(spread)
        model.train()
        parts = []
        # under torchrun every rank takes the same number of gradient steps (gradients are all-reduced)
        batches = agree_min(-(-len(keep) // cfg.batch_groups), ranks)
        if batches:
            images, ego, navs = observation_tensors([groups[i].observation for i in keep], bundle.config)
            nav = torch.tensor([tok.id(f"<nav:{n}>") for n in navs])
            ids = torch.from_numpy(np.stack([groups[i].ids for i in keep])).long()  # (G, N, L)
            if ids.shape[-1] != layout.length:
                raise ValueError(f"rollout ids have {ids.shape[-1]} positions, the layout {layout.length}")
            a = torch.from_numpy(adv[keep]).float()
            n = cfg.rollouts
            with torch.no_grad():
                old, ref = [], []
                for b in range(0, len(keep), cfg.batch_groups):
                    sl = slice(b, b + cfg.batch_groups)
                    rows = ids[sl].flatten(0, 1)
                    old.append(loss.logprobs(model, batch_prompts(model, images[sl], ego[sl], nav[sl], tok.bos_id)
                                             .repeat_interleave(n, 0), rows))
                    ref.append(loss.logprobs(reference, batch_prompts(reference, images[sl], ego[sl], nav[sl], tok.bos_id)
                                             .repeat_interleave(n, 0), rows))
                old_lp = torch.cat(old).view(len(keep), n, -1)
                ref_lp = torch.cat(ref).view(len(keep), n, -1)
            bar = tqdm(total=cfg.epochs * batches, desc=f"rl update {it + 1}/{cfg.iterations}",
                       disable=not progress or ranks.rank != 0)
            for _ in range(cfg.epochs):
                order = torch.randperm(len(keep), generator=gen)
                for b in range(batches):
                    idx = order[b * cfg.batch_groups:(b + 1) * cfg.batch_groups]
                    prompt = batch_prompts(model, images[idx], ego[idx], nav[idx], tok.bos_id).repeat_interleave(n, 0)
                    p = loss(model, prompt, ids[idx].flatten(0, 1), a[idx].flatten(), old_lp[idx].flatten(0, 1),
                             ref_lp[idx].flatten(0, 1), gen)
                    opt.zero_grad(set_to_none=True)
                    p.total.backward()
                    average_gradients(model, ranks)
                    torch.nn.utils.clip_grad_norm_([q for q in model.parameters() if q.requires_grad], cfg.grad_clip)
                    opt.step()
                    parts.append(p)
                    bar.update()
                    bar.set_postfix(kl=f"{p.kl:.4f}", clip=f"{p.clipped:.2f}")
            bar.close()
        model.eval()
        row.update({"pg": float(np.mean([p.pg for p in parts])) if parts else 0.0,
                    "kl": float(np.mean([p.kl for p in parts])) if parts else 0.0,
                    "draft": float(np.mean([p.draft for p in parts])) if parts else 0.0,
                    "clipped": float(np.mean([p.clipped for p in parts])) if parts else 0.0,
                    "updates": len(parts), "seconds": time.time() - t0})
        if val0 is not None:
            val = validate(bundle, cfg)
            row.update(val_pdms=val["pdms"], val_at_fault_per_km=val["at_fault_collisions_per_km"],
                       val_ep=val["ep"], val_pdms_before=val0["pdms"], val_at_fault_per_km_before=val0["at_fault_collisions_per_km"])
        history.append(row)
        log.info("rl iteration %d: %d groups (%d with spread), reward %.3f (best of group %.3f), driven PDMS %.3f, "
                 "kl %.4f, %.0f s", it, row["groups"], row["groups_with_spread"], row["reward_mean"],
                 row["reward_best_of_group"], row["driven_pdms"], row["kl"], row["seconds"])
        if ranks.rank == 0:
            out = Path(cfg.out)
            ckpt.save(bundle, out, {"rl_iteration": it + 1})
            (out / "rl_history.json").write_text(json.dumps(history, indent=1))
            plot_rewards(history, out / "rl_reward.png")
    finish(ranks)
    return bundle, history


def plot_rewards(history: list[dict], path: Path) -> None:
    """Reward curve: the sampled rollouts' mean fork score, the best of each group, the driven episodes'
    closed-loop PDMS, and the KL to the supervised model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    it = [h["iteration"] + 1 for h in history]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(it, [h["reward_mean"] for h in history], "o-", label="rollouts' fork PDMS (mean)")
    ax.plot(it, [h["reward_best_of_group"] for h in history], "s--", label="best of each group")
    ax.plot(it, [h["driven_pdms"] for h in history], "^-", label="driven closed-loop PDMS (training episodes)")
    if "val_pdms" in history[0]:
        ax.plot([0] + it, [history[0]["val_pdms_before"]] + [h["val_pdms"] for h in history], "D-", color="black",
                label="greedy planner, fixed validation episodes")
    ax.set_xlabel("iteration")
    ax.set_ylabel("score")
    ax.legend(fontsize=8)
    ax.set_title("GRPO on the closed-loop score")
    ax2.plot(it, [h["kl"] for h in history], "o-", color="tab:red")
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("KL to the supervised model (per token)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
