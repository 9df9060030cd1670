"""Data parallel under torchrun, for supervised training and RL alike: gloo on CPU, nccl on GPU;
every rank starts from rank 0's weights and gradients are averaged after each backward."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Ranks:
    distributed: bool = False
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")


def init_ranks() -> Ranks:
    """Join the torchrun process group when WORLD_SIZE > 1 (else a single process on the CPU)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    return Ranks(True, dist.get_rank(), dist.get_world_size(), device)


def broadcast_weights(model: torch.nn.Module, ranks: Ranks) -> None:
    """Every rank takes rank 0's weights (the same start everywhere)."""
    if ranks.distributed:
        for p in model.parameters():
            dist.broadcast(p.data, 0)


def average_gradients(model: torch.nn.Module, ranks: Ranks) -> None:
    if ranks.distributed:
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= ranks.world


def agree_min(value: int, ranks: Ranks) -> int:
    """The smallest of every rank's `value`: ranks that must take the same number of collective steps
    (each does that many gradient steps, whatever its own data allowed) agree on it here."""
    if not ranks.distributed:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=ranks.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def finish(ranks: Ranks) -> None:
    if ranks.distributed:
        dist.destroy_process_group()
