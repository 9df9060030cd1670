"""Context swap: some rows of a batch carry another row's text sections, unsupervised there.

Why (measured on validation seed 31, docs/training.md): the full model's trajectory reads its lateral
offset off one explanation sentence. "keeping its lane" labels a trajectory with every y = 0 in 81% of
the training samples, "following the curve of the road" a bent one in 86%, so the trajectory learnt
y from the text and not from the cameras (its loss is the same with blank or another sample's images).
The sentence itself is not read from the image (P("following") is 0.33 in either scene), so at a curve
the greedy plan says "keeping" and drives straight off the road.

In a swapped row the named sections hold the tokens of another row of the batch: text that looks
right and says nothing about this scene. Their own loss is dropped there (those targets belong to the
other scene); every later section keeps its labels, so the trajectory and the meta behaviour learn to
come out right when the text before them is wrong, i.e. from the cameras, the ego state and the
navigation command. At inference nothing changes: the model decodes its own text.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ddrive_ros.scaffold.layout import Layout


def swap_context(ids: torch.Tensor, labelled: torch.Tensor, layout: Layout, sections: Sequence[str], rate: float,
                 generator: torch.Generator, exclusive: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, L) ids and labels -> (ids, labelled, swapped rows (B,) bool). A row is swapped with
    probability `rate`; it takes the named sections from the row `B // 2` places on (a fixed shift, so
    never from itself when B > 1). `exclusive`: the rows that keep their own text supervise only the
    sections up to and including the swapped ones, so the later sections (the trajectory) learn from
    swapped rows alone and never see a text that agrees with them."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"context_swap must be a fraction in [0, 1], got {rate}")
    names = layout.schema.section_names
    unknown = [s for s in sections if s not in names]
    if unknown:
        raise ValueError(f"context_swap_sections {unknown} are not sections of schema {layout.schema.name!r} ({names})")
    if "trajectory" in sections:
        raise ValueError("context_swap_sections must not include the trajectory: it is what learns from the swap")
    b = ids.shape[0]
    rows = torch.rand(b, generator=generator) < rate if b > 1 else torch.zeros(b, dtype=torch.bool)
    rows = rows.to(ids.device)
    if not sections:
        return ids, labelled, rows
    index = torch.tensor([names.index(s) for s in sections])
    section = torch.as_tensor(layout.section)
    in_sections = torch.isin(section, index).to(ids.device)  # (L,)
    where = rows[:, None] & in_sections[None]
    donor = ids.roll(b // 2, dims=0)
    labelled = labelled & ~where
    if exclusive:  # unswapped rows: nothing after the swapped sections is supervised
        after = (section > int(index.max())).to(ids.device)
        labelled = labelled & ~(~rows[:, None] & after[None])
    return torch.where(where, donor, ids), labelled, rows
