"""Section-adaptive masking noise: per sample and section, a mask ratio t_s ~ Beta(a_s, b_s);
only editable, labelled positions are ever masked (scaffold stays as the model will see it)."""
from __future__ import annotations

import numpy as np
import torch

from ddrive_ros.scaffold.layout import Layout


def section_mask_ratios(layout: Layout, batch: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, n_sections) mask ratios drawn from each section's Beta(a, b), kept in [0.02, 1]."""
    ab = torch.tensor([s.noise_beta for s in layout.schema.sections], dtype=torch.float32)
    # Beta via two Gammas, drawn with the generator for reproducibility
    g1 = torch._standard_gamma(ab[:, 0].expand(batch, -1).contiguous(), generator=generator)
    g2 = torch._standard_gamma(ab[:, 1].expand(batch, -1).contiguous(), generator=generator)
    return (g1 / (g1 + g2)).clamp(0.02, 1.0)


def corrupt(ids: torch.Tensor, labelled: torch.Tensor, layout: Layout, mask_id: int,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask labelled editable positions with their section's ratio. Returns (noisy ids, masked bool)."""
    b, length = ids.shape
    ratios = section_mask_ratios(layout, b, generator)
    section = torch.as_tensor(layout.section, device=ids.device)
    per_pos = ratios[:, section]  # (B, L)
    u = torch.rand(b, length, generator=generator)
    masked = (u < per_pos) & labelled
    return torch.where(masked, torch.full_like(ids, mask_id), ids), masked


def section_weights(layout: Layout, overrides: dict[str, float] | None = None) -> np.ndarray:
    """(L,) loss weight of each position's section: the schema's `loss_weight`, or for the sections named in
    `overrides` the weight given there (a training stage that weights one part of the plan up). A name the
    schema does not have is an error, not a no-op."""
    overrides = dict(overrides or {})
    names = [s.name for s in layout.schema.sections]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(f"section_weights names {unknown}, not sections of schema {layout.schema.name!r}: {names}")
    bad = {k: v for k, v in overrides.items() if not float(v) >= 0}
    if bad:
        raise ValueError(f"section_weights must be >= 0, got {bad}")
    w = np.array([float(overrides.get(s.name, s.loss_weight)) for s in layout.schema.sections], dtype=np.float32)
    return w[layout.section]
