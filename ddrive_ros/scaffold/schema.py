"""Output schema: which positions are scaffold (fixed) and which are editable (denoised).

A schema YAML lists sections in causal order, each with fields. `Schema.template()`
turns it into one token template: a list whose items are either a fixed token
string (scaffold) or a `Slot` (an editable value position with the set of tokens
allowed there). `Layout` (in layout.py) then cuts the template into
section-aligned blocks for a given block size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ddrive_ros import config_file, share_dir

DIGITS = tuple(str(d) for d in range(10))
SIGNS = ("+", "-")
BOOLS = ("yes", "no")
STRUCTURE = ("{", "}", "[", "]", ":", ",", '"', ".")


@dataclass(frozen=True)
class Slot:
    """One editable position. `field` names what it encodes; `allowed` the tokens that may stand there."""

    field: str  # e.g. "critical_objects.lead_vehicle", "trajectory.waypoints.3.y.sign"
    group: str  # allowed-token group name, e.g. "bool", "digit", "sign", "word", "enum:lateral", "bin"
    allowed: tuple[str, ...]


@dataclass(frozen=True)
class NumberSpec:
    """A value written as decimal digits ('dd.d', 'sdd.d') or as one bin token."""

    kind: str  # "number" | "bins"
    int_digits: int = 2
    frac_digits: int = 1
    signed: bool = False
    min: float = 0.0
    step: float = 0.1
    count: int = 0

    @classmethod
    def from_yaml(cls, d: dict[str, Any]) -> "NumberSpec":
        kind = d.get("type", "number")
        if kind == "number":
            return cls("number", int(d["int_digits"]), int(d["frac_digits"]), bool(d.get("signed", False)))
        if kind == "bins":
            return cls("bins", min=float(d["min"]), step=float(d["step"]), count=int(d["count"]))
        raise ValueError(f"unknown number type {kind!r} (expected 'number' or 'bins')")

    @property
    def n_tokens(self) -> int:
        return 1 if self.kind == "bins" else self.int_digits + self.frac_digits + int(self.signed)

    @property
    def max_abs(self) -> float:
        return 10.0**self.int_digits - 10.0**-self.frac_digits


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str  # bool | enum | number | text | waypoints
    values: tuple[str, ...] = ()
    length: int = 0  # text
    number: NumberSpec | None = None
    count: int = 0  # waypoints
    dt: float = 0.5
    x: NumberSpec | None = None
    y: NumberSpec | None = None


@dataclass(frozen=True)
class SectionSpec:
    name: str
    loss_weight: float
    noise_beta: tuple[float, float]
    fields: tuple[FieldSpec, ...]


def bin_token(i: int) -> str:
    return f"<bin_{i}>"


@dataclass
class Schema:
    name: str
    sections: tuple[SectionSpec, ...]
    default_block_size: int = 32
    words: tuple[str, ...] = ()
    _template: list[str | Slot] | None = field(default=None, repr=False)

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(cls, name_or_path: str | Path) -> "Schema":
        """Load `config/schema/NAME.yaml` (or a path to a YAML file)."""
        path = config_file("schema", name_or_path, "schema")
        return cls.from_dict(yaml.safe_load(path.read_text()), words_dir=path.parent)

    @classmethod
    def from_dict(cls, d: dict[str, Any], words_dir: Path | None = None) -> "Schema":
        sections = []
        for s in d["sections"]:
            fields = []
            for f in s["fields"]:
                t = f["type"]
                if t == "bool":
                    fields.append(FieldSpec(f["name"], t))
                elif t == "enum":
                    values = tuple(f["values"])
                    if not all(isinstance(v, str) for v in values):
                        raise ValueError(f"enum {f['name']}: values must be strings (quote YAML words like OFF/yes): {values}")
                    fields.append(FieldSpec(f["name"], t, values=values))
                elif t == "number":
                    fields.append(FieldSpec(f["name"], t, number=NumberSpec.from_yaml(f)))
                elif t == "text":
                    fields.append(FieldSpec(f["name"], t, length=int(f["length"])))
                elif t == "waypoints":
                    fields.append(
                        FieldSpec(
                            f["name"], t, count=int(f["count"]), dt=float(f["dt"]),
                            x=NumberSpec.from_yaml(f["x"]), y=NumberSpec.from_yaml(f["y"]),
                        )
                    )
                else:
                    raise ValueError(f"section {s['name']}: unknown field type {t!r}")
            beta = tuple(float(v) for v in s.get("noise_beta", (1.0, 1.0)))
            sections.append(SectionSpec(s["name"], float(s.get("loss_weight", 1.0)), beta, tuple(fields)))
        words: tuple[str, ...] = ()
        if any(f.type == "text" for s in sections for f in s.fields):
            words = load_words((words_dir or share_dir() / "config" / "schema") / "words.txt")
        return cls(d["name"], tuple(sections), int(d.get("block_size", 32)), words)

    # ---------------------------------------------------------------- template
    def template(self) -> list[str | Slot]:
        """The full output template: `{ section : value , ... } <eos>`."""
        if self._template is None:
            items: list[str | Slot] = ["{"]
            for si, sec in enumerate(self.sections):
                items += [sec.name, ":"]
                items += self._section_body(sec)
                items.append("," if si < len(self.sections) - 1 else "}")
            items.append("<eos>")
            self._template = items
        return self._template

    def section_spans(self) -> list[tuple[int, int]]:
        """[start, end) of each section in the template. The opening `{` belongs to the first
        section, each trailing `,` (and the closing `}` and `<eos>`) to the section before it."""
        spans, pos = [], 0
        for si, sec in enumerate(self.sections):
            start = pos
            length = 2 + len(self._section_body(sec)) + 1
            if si == 0:
                length += 1
            if si == len(self.sections) - 1:
                length += 1
            pos += length
            spans.append((start, pos))
        return spans

    def _section_body(self, sec: SectionSpec) -> list[str | Slot]:
        if len(sec.fields) == 1 and sec.fields[0].type in ("text", "waypoints"):
            return self._field_value(sec.name, sec.fields[0])
        items: list[str | Slot] = ["{"]
        for fi, f in enumerate(sec.fields):
            items += [f.name, ":"]
            items += self._field_value(f"{sec.name}.{f.name}", f)
            if fi < len(sec.fields) - 1:
                items.append(",")
        items.append("}")
        return items

    def _field_value(self, path: str, f: FieldSpec) -> list[str | Slot]:
        if f.type == "bool":
            return [Slot(path, "bool", BOOLS)]
        if f.type == "enum":
            return [Slot(path, f"enum:{f.name}", f.values)]
        if f.type == "number":
            return _number_items(path, f.number)
        if f.type == "text":
            allowed = ("<expad>", *self.words)
            return ['"', *[Slot(f"{path}.{i}", "word", allowed) for i in range(f.length)], '"']
        if f.type == "waypoints":
            items: list[str | Slot] = ["["]
            for k in range(f.count):
                items += ["["]
                items += _number_items(f"{path}.{k}.x", f.x)
                items += [","]
                items += _number_items(f"{path}.{k}.y", f.y)
                items += ["]", "," if k < f.count - 1 else "]"]
            return items
        raise ValueError(f"unknown field type {f.type}")

    # ---------------------------------------------------------------- queries
    def section(self, name: str) -> SectionSpec:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(f"schema {self.name} has no section {name!r}")

    @property
    def section_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sections)

    def waypoint_field(self) -> FieldSpec:
        for s in self.sections:
            for f in s.fields:
                if f.type == "waypoints":
                    return f
        raise KeyError(f"schema {self.name} has no waypoints field")

    def vocabulary_pieces(self) -> list[str]:
        """Every token the template can hold, scaffold or value, in a stable order."""
        seen: dict[str, None] = {}
        for item in self.template():
            for tok in ([item] if isinstance(item, str) else item.allowed):
                seen.setdefault(tok, None)
        return list(seen)

    def summary(self, block_size: int | None = None) -> list[dict[str, Any]]:
        """Per section: editable, scaffold and block counts (what `ddrive schema` prints)."""
        bs = block_size or self.default_block_size
        tmpl = self.template()
        rows = []
        for sec, (a, b) in zip(self.sections, self.section_spans()):
            editable = sum(isinstance(tmpl[i], Slot) for i in range(a, b))
            rows.append(
                {
                    "name": sec.name,
                    "editable": editable,
                    "scaffold": (b - a) - editable,
                    "blocks": math.ceil(editable / bs),
                    "loss_weight": sec.loss_weight,
                    "noise_beta": list(sec.noise_beta),
                }
            )
        return rows


def _number_items(path: str, spec: NumberSpec) -> list[str | Slot]:
    if spec.kind == "bins":
        return [Slot(path, "bin", tuple(bin_token(i) for i in range(spec.count)))]
    items: list[str | Slot] = []
    if spec.signed:
        items.append(Slot(f"{path}.sign", "sign", SIGNS))
    items += [Slot(f"{path}.d{i}", "digit", DIGITS) for i in range(spec.int_digits)]
    if spec.frac_digits:
        items.append(".")
        items += [Slot(f"{path}.f{i}", "digit", DIGITS) for i in range(spec.frac_digits)]
    return items


def load_words(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise FileNotFoundError(f"explanation word list {path} not found")
    words = []
    for line in path.read_text().splitlines():
        w = line.strip()
        if w and not w.startswith("#") and w not in words:
            words.append(w)
    return tuple(words)
