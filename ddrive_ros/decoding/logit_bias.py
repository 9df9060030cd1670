"""A decode-time prior correction of enum fields: an additive offset to the log-odds of some values of a
field (e.g. lateral LEFT_TURN +2.0), the same at every position that field's slot takes.

Why: a model trained on the world's class mix answers the rare manoeuvres too seldom for a metric that
weighs every class the same (macro-F1). Adding log(prior ratio)-like offsets to the rare classes'
logits is the standard post-hoc correction (logit adjustment); the offsets are fitted on validation
episodes (`bench/meta_calibration.py`) and stored with the checkpoint (`calibration:` in its
config.yaml), so every consumer of the model decodes with them.

Exactness: the offsets enter the loop's additive allowed-token bias (`layout_tensors`), which every
decoder's softmax and greedy argmax read (AR, speculative verification, diffusion drafts, tree rows,
the previous-plan run). So speculative decoding still equals AR token for token: both decode the
same corrected distribution.

A spec is {field: {value: offset}}; `parse` also takes "field.VALUE=offset" strings (CLI, node).
"""
from __future__ import annotations

import math
from typing import Any

from ddrive_ros.scaffold.layout import Layout

Spec = dict[str, dict[str, float]]
# (layout position, token id, offset): hashable, so the layout's device tensors can be cached per spec
Entries = tuple[tuple[int, int, float], ...]


def parse(spec: Any, where: str = "logit bias") -> Spec:
    """{field: {value: offset}} from a mapping of that shape, or from strings "field.VALUE=offset"
    (an iterable, or one comma-separated string; "" or "none": no offsets). Raises ValueError naming
    `where` and the entry at fault."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        spec = [] if spec.strip().lower() in ("", "none") else [s for s in spec.split(",") if s.strip()]
    out: Spec = {}
    if isinstance(spec, dict):
        for field, values in spec.items():
            if not isinstance(values, dict):
                raise ValueError(f"{where}: field {field!r} must map values to offsets, got {values!r}")
            for value, offset in values.items():
                out.setdefault(str(field), {})[str(value)] = _offset(offset, f"{where}: {field}.{value}")
        return out
    for item in spec:
        text = str(item).strip()
        key, eq, num = text.partition("=")
        field, dot, value = key.strip().partition(".")
        if not (eq and dot and field and value):
            raise ValueError(f"{where}: {text!r} is not 'field.VALUE=offset' (e.g. lateral.LEFT_TURN=2.0)")
        out.setdefault(field, {})[value.strip()] = _offset(num, f"{where}: {text!r}")
    return out


def _offset(x: Any, where: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: offset {x!r} is not a number") from e
    if not math.isfinite(v):
        raise ValueError(f"{where}: offset {v} is not finite")
    return v


def to_strings(spec: Spec) -> list[str]:
    """The inverse of `parse` for strings: ["field.VALUE=offset", ...] in a stable order."""
    return [f"{f}.{v}={spec[f][v]:g}" for f in sorted(spec) for v in sorted(spec[f])]


def enum_slots(layout: Layout) -> dict[str, tuple[list[int], tuple[str, ...]]]:
    """{enum field: (its positions in the layout, its values in schema order)}."""
    out: dict[str, tuple[list[int], tuple[str, ...]]] = {}
    for i, slot in enumerate(layout.slots):
        if slot is not None and slot.group.startswith("enum:"):
            positions, _ = out.setdefault(slot.group[len("enum:"):], ([], tuple(slot.allowed)))
            positions.append(i)
    return out


def entries(layout: Layout, spec: Spec) -> Entries:
    """The (position, token id, offset) triples `spec` asks for in `layout`. Every field must be an enum
    of the layout's schema and every value one of its values, else ValueError naming them."""
    if not spec:
        return ()
    slots = enum_slots(layout)
    by_field = {name: pos for name, (pos, _) in slots.items()}
    values = {name: vals for name, (_, vals) in slots.items()}
    out = []
    for field, offsets in spec.items():
        if field not in by_field:
            raise ValueError(f"logit bias: schema {layout.schema.name} has no enum field {field!r} "
                             f"(enum fields: {sorted(by_field)})")
        for value, offset in offsets.items():
            if value not in values[field]:
                raise ValueError(f"logit bias: {field} has no value {value!r} (values: {list(values[field])})")
            tok = layout.tokenizer.id(value)
            out += [(pos, tok, float(offset)) for pos in by_field[field] if offset != 0.0]
    return tuple(sorted(out))


def describe(spec: Spec) -> str:
    return ", ".join(to_strings(spec)) or "none"
