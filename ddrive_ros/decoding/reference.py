"""Uncached reference backend: every step recomputes the whole sequence under the explicit mask.

It records the tokens each forward writes, exactly where the cached backend writes
K/V, and answers a step with one full forward whose mask is token-causal over
everything before the window and, for a draft, bidirectional inside the window.
Slow and simple on purpose: the tests hold the cached backends to it.
"""
from __future__ import annotations

import torch

from ddrive_ros.model.vla import DrivingVLA


def block_causal_mask(total: int, start: int, valid: int, bidirectional: bool) -> torch.Tensor:
    """(total, total) bool: causal everywhere; rows of the window [start, start+valid) see the
    whole window when bidirectional. Positions past the window's valid end are never seen by it."""
    i = torch.arange(total)[:, None]
    j = torch.arange(total)[None, :]
    mask = j <= i
    if bidirectional:
        in_window = (i >= start) & (i < start + valid)
        mask = mask | (in_window & (j < start + valid))
    return mask


class ReferenceBackend:
    name = "reference"
    dynamic_windows = True  # recomputes everything: any window, inside a block or not

    def __init__(self, model: DrivingVLA, window: int, max_rows: int = 1):
        self.model = model.float().eval()
        self.prompt_len = model.cfg.prompt_len
        self.window = window
        self.vocab_size = model.cfg.vocab_size
        length = model.cfg.cache_len(window)
        self.tokens = torch.zeros(max_rows, length - self.prompt_len, dtype=torch.long)
        self.action = torch.zeros(length, dtype=torch.bool)  # which FFN/head wrote each position
        self.prompt_embeds: torch.Tensor | None = None

    @torch.inference_mode()
    def prompt(self, images, ego, bos, nav) -> torch.Tensor:
        from ddrive_ros.runtime.torch_backend import images_to_input

        visual = self.model.encode_images(images_to_input(images, torch.float32))
        return self.model.prompt_embeds(visual, ego.float(), bos, nav)

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        self.prompt_embeds = prompt
        p = prompt.shape[1]
        mask = block_causal_mask(p, p, 0, False)[None]
        return self.model.backbone.forward_masked(prompt, torch.arange(p), mask, False)[:, -1].float()

    @torch.inference_mode()
    def step(self, tokens, start, valid, bidirectional, action) -> torch.Tensor:
        n, w = tokens.shape
        rel = start - self.prompt_len
        self.tokens[:n, rel:rel + w] = tokens
        out = self.tokens[:n, : rel + w]
        total = self.prompt_len + rel + w
        mask = block_causal_mask(total, start, valid, bidirectional)[None]
        self.action[start:start + w] = action
        act = self.action[:total]
        prompt = self.prompt_embeds.expand(n, -1, -1)
        logits = self.model.forward_full(prompt, out, mask, act)
        return logits[:, start:start + w].float()

    def fork(self, n: int, prefix_len: int) -> None:
        rel = prefix_len - self.prompt_len
        self.tokens[1:n, :rel] = self.tokens[:1, :rel]
