"""Turning logits into tokens: allowed-token constraints, greedy or tempered sampling,
confidence, and the speculative accept/reject rule shared by every verifier."""
from __future__ import annotations

import numpy as np
import torch

NEG = -1e9


def constrained_probs(logits: torch.Tensor, allowed: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax over the tokens allowed at each position. logits (n, W, V); allowed (W, V): bool, or the
    additive float bias `allowed_bias` makes of it (0 where allowed, NEG elsewhere: one add per call
    instead of a negation and a masked fill; the same probabilities bit for bit, since a disallowed
    logit's exp underflows to 0 either way). temperature 0 gives the T=1 distribution (used for
    confidence; choice is argmax)."""
    t = temperature if temperature > 0 else 1.0
    masked = logits.float() + allowed if allowed.dtype != torch.bool else logits.float().masked_fill(~allowed, NEG)
    return torch.softmax(masked if t == 1.0 else masked / t, dim=-1)


# greedy choices on CPU tensors in numpy (see greedy_choice); the torch path is what other devices run
NUMPY_ON_CPU = True


def greedy_choice(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The most likely allowed token per position, (n, W), from the logits without a softmax: the softmax
    is monotonic, so its argmax is the logits' (one add and one argmax instead of an exp and a sum over
    the vocabulary). Every greedy choice of the AR and speculative decoders is made here, so the two
    agree token for token by construction.

    On the CPU the add and the argmax run in numpy: on a block's few thousand numbers torch's per-op
    dispatch costs several times the arithmetic (25 against 3.5 us for the argmax of 16 x 823
    logits). Both return the first maximal index, so the choice is the same."""
    if NUMPY_ON_CPU and logits.device.type == "cpu" and logits.dtype == torch.float32 and allowed.dtype == torch.float32:
        return torch.from_numpy(np.add(logits.numpy(), allowed.numpy()).argmax(-1))
    return greedy_scores(logits, allowed).argmax(-1)


def greedy_scores(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Float32 logits with disallowed tokens pushed to NEG: what greedy choices take the argmax of."""
    return logits.float() + allowed if allowed.dtype != torch.bool else logits.float().masked_fill(~allowed, NEG)


def allowed_bias(allowed: torch.Tensor) -> torch.Tensor:
    """(W, V) bool -> float32 additive bias for `constrained_probs`: 0 where allowed, NEG elsewhere."""
    return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device).masked_fill(~allowed, NEG)


def choose(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick a token per position: argmax or a sample. Returns tokens (n, W) and their probability."""
    if greedy:
        conf, tok = probs.max(dim=-1)
        return tok, conf
    n, w, v = probs.shape
    tok = torch.multinomial(probs.reshape(n * w, v), 1, generator=generator).view(n, w)
    return tok, probs.gather(-1, tok[..., None])[..., 0]


def first_true(mask: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last dim, or its length where there is none."""
    w = mask.shape[-1]
    idx = torch.arange(w, device=mask.device).expand_as(mask)
    return torch.where(mask, idx, torch.full_like(idx, w)).min(dim=-1).values


def verify(draft: torch.Tensor, draft_probs: torch.Tensor | None, ar_probs: torch.Tensor, span: torch.Tensor,
           greedy: bool, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-to-right acceptance of drafted `span` positions against the AR distribution.

    Greedy: keep drafts while they equal the AR argmax; at the first mismatch take the AR token
    (`ar_probs` may then be any scores with the same argmax, e.g. logits: no softmax needed).
    Sampling: accept with min(1, q/p); on rejection resample from normalise(max(q - p, 0)),
    which leaves the AR distribution q intact. Positions after the first rejection are dropped.
    Returns (tokens (n, W), decided (n, W) bool, rejected_at (n,) index or W).
    """
    n, w = draft.shape
    if greedy:
        return verify_greedy(draft, ar_probs.argmax(-1), span)
    else:
        q_tok = ar_probs.gather(-1, draft[..., None])[..., 0]
        p_tok = draft_probs.gather(-1, draft[..., None])[..., 0]
        u = torch.rand(draft.shape, generator=generator, device=draft.device)
        ok = u < torch.clamp(q_tok / p_tok.clamp_min(1e-12), max=1.0)
        residual = (ar_probs - draft_probs).clamp_min(0.0)
        mass = residual.sum(-1, keepdim=True)
        residual = torch.where(mass > 1e-12, residual / mass.clamp_min(1e-12), ar_probs)
        replacement = torch.multinomial(residual.reshape(n * w, -1), 1, generator=generator).view(n, w)
    return _accept_prefix(draft, ok, replacement, span)


def verify_greedy(draft: torch.Tensor, ar_tokens: torch.Tensor, span: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`verify` at temperature 0 given the AR argmax tokens (`greedy_choice`), which the caller may
    reuse (the causal redraft of an action block is the same argmax)."""
    return _accept_prefix(draft, draft == ar_tokens, ar_tokens, span)


def _accept_prefix(draft: torch.Tensor, ok: torch.Tensor, replacement: torch.Tensor, span: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep the drafts of `span` up to the first one not `ok`, which takes its replacement."""
    w = draft.shape[-1]
    rejected_at = first_true(span & ~ok)
    idx = torch.arange(w, device=draft.device)[None]
    accepted = span & (idx < rejected_at[:, None])
    fixed = span & (idx == rejected_at[:, None])
    tokens = torch.where(fixed, replacement, draft)
    return tokens, accepted | fixed, rejected_at
