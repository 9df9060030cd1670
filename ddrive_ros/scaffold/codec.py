"""Plan <-> token ids over a schema's template.

Encoding fills every editable slot from a Plan (sections the Plan lacks are
left masked and reported unlabelled, so training leaves them out of the loss).
Decoding is total: any id sequence gives a Plan, with a validity flag per field
and a default where the tokens do not form a value.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ddrive_ros.plan import MetaBehavior, Plan
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import BOOLS, FieldSpec, NumberSpec, SectionSpec, bin_token
from ddrive_ros.trajectory import Quantizer, digits_decode, digits_encode, digits_encode_array

log = logging.getLogger(__name__)

META_DEFAULTS = MetaBehavior()


@dataclass
class Encoded:
    ids: np.ndarray  # (L,) int64; MASK at editable positions of unlabelled sections
    labelled: np.ndarray  # (L,) bool; editable positions that carry a label
    clipped: bool  # a trajectory or speed value was outside its range and clipped


def _quantizer(spec: NumberSpec) -> Quantizer:
    return Quantizer(spec.min, spec.step, spec.count)


class Codec:
    def __init__(self, layout: Layout):
        self.layout = layout
        self.schema = layout.schema
        self.tok = layout.tokenizer
        self._slot_index = {s.field: i for i, s in enumerate(layout.slots) if s is not None}
        self._spelling_cache = None  # built on first use by _spelling

    # ================================================================ encode
    def encode(self, plan: Plan) -> Encoded:
        values: dict[str, str] = {}
        clipped = False
        for sec in self.schema.sections:
            for f in sec.fields:
                path = f"{sec.name}.{f.name}" if not _single_value(sec) else sec.name
                got, c = self._encode_field(path, sec, f, plan)
                values.update(got)
                clipped |= c
        ids = self.layout.template_ids.copy()
        labelled = np.zeros(self.layout.length, dtype=bool)
        for name, token in values.items():
            i = self._slot_index[name]
            ids[i] = self.tok.id(token)
            labelled[i] = True
        return Encoded(ids, labelled, clipped)

    def _encode_field(self, path: str, sec: SectionSpec, f: FieldSpec, plan: Plan) -> tuple[dict[str, str], bool]:
        if sec.name == "critical_objects":
            if not plan.critical_objects:
                return {}, False
            return {path: BOOLS[0] if plan.critical_objects.get(f.name, False) else BOOLS[1]}, False
        if sec.name == "explanation":
            if plan.explanation is None:
                return {}, False
            words = plan.explanation.split()
            unknown = [w for w in words if w not in self.schema.words]
            if unknown:
                log.debug("explanation words outside the vocabulary become <unk>: %s", unknown[:5])
            words = [w if w in self.schema.words else "<unk>" for w in words][: f.length]
            words += ["<expad>"] * (f.length - len(words))
            return {f"{path}.{i}": w for i, w in enumerate(words)}, False
        if sec.name == "future_meta_behavior":
            if plan.meta is None:
                return {}, False
            value = getattr(plan.meta, f.name)
            if f.type == "enum":
                return {path: value if value in f.values else f.values[0]}, value not in f.values
            return _number_tokens(path, f.number, float(value))
        if f.type == "waypoints":
            wps = np.asarray(plan.waypoints, dtype=float)
            if wps.shape != (f.count, 2):
                raise ValueError(f"plan has waypoints {wps.shape}, schema {self.schema.name} wants ({f.count}, 2)")
            out: dict[str, str] = {}
            clipped = False
            for k in range(f.count):
                for axis, spec in (("x", f.x), ("y", f.y)):
                    got, c = _number_tokens(f"{path}.{k}.{axis}", spec, wps[k, "xy".index(axis)])
                    out.update(got)
                    clipped |= c
            return out, clipped
        raise ValueError(f"no encoder for section {sec.name} field {f.name}")

    # ================================================================ decode
    def decode(self, ids: np.ndarray) -> Plan:
        """Total: never raises on content; lengths must match the layout."""
        ids = np.asarray(ids).reshape(-1)
        if ids.shape[0] != self.layout.length:
            raise ValueError(f"expected {self.layout.length} output ids for schema {self.schema.name}, got {ids.shape[0]}")
        tokens = {s.field: self.tok.token(int(ids[i])) for i, s in enumerate(self.layout.slots) if s is not None}
        validity: dict[str, bool] = {}
        wf = self.schema.waypoint_field()
        plan = Plan(
            schema=self.schema.name,
            waypoints=np.zeros((wf.count, 2)),
            waypoint_times=wf.dt * np.arange(1, wf.count + 1),
        )
        for sec in self.schema.sections:
            for f in sec.fields:
                path = f"{sec.name}.{f.name}" if not _single_value(sec) else sec.name
                self._decode_field(path, sec, f, tokens, plan, validity)
        plan.validity = validity
        return plan

    def _decode_field(self, path, sec, f, tokens, plan, validity) -> None:
        if sec.name == "critical_objects":
            t = tokens[path]
            validity[path] = t in BOOLS
            plan.critical_objects[f.name] = t == BOOLS[0]
        elif sec.name == "explanation":
            words = [tokens[f"{path}.{i}"] for i in range(f.length)]
            content = [w for w in words if w != "<expad>"]
            n = len(content)
            validity[path] = all(w in self.schema.words for w in content) and all(w == "<expad>" for w in words[n:])
            plan.explanation = " ".join(content)
        elif sec.name == "future_meta_behavior":
            if plan.meta is None:
                plan.meta = MetaBehavior()
            if f.type == "enum":
                t = tokens[path]
                validity[path] = t in f.values
                setattr(plan.meta, f.name, t if t in f.values else getattr(META_DEFAULTS, f.name))
            else:
                value, ok = _number_value(path, f.number, tokens)
                validity[path] = ok
                setattr(plan.meta, f.name, value)
        elif f.type == "waypoints":
            ok_all = True
            for k in range(f.count):
                for axis, spec in (("x", f.x), ("y", f.y)):
                    value, ok = _number_value(f"{path}.{k}.{axis}", spec, tokens)
                    plan.waypoints[k, "xy".index(axis)] = value
                    ok_all &= ok
            validity[path] = ok_all

    # ================================================================ waypoints as tokens
    def _waypoint_path(self) -> tuple[str, FieldSpec]:
        for sec in self.schema.sections:
            for f in sec.fields:
                if f.type == "waypoints":
                    return (f"{sec.name}.{f.name}" if not _single_value(sec) else sec.name), f
        raise ValueError(f"schema {self.schema.name} has no waypoints field")

    def waypoint_positions(self, k: int) -> list[int]:
        """Output positions of waypoint k's tokens (both axes)."""
        path, f = self._waypoint_path()
        prefix = f"{path}.{k}."
        return [i for name, i in self._slot_index.items() if name.startswith(prefix)]

    def waypoint_tokens(self, k: int, xy: np.ndarray) -> dict[int, int]:
        """Position -> token id spelling waypoint k at xy (clipped to the schema's range)."""
        path, f = self._waypoint_path()
        if not 0 <= k < f.count:
            raise ValueError(f"waypoint index {k} outside 0..{f.count - 1}")
        out: dict[int, int] = {}
        for axis, spec in (("x", f.x), ("y", f.y)):
            got, _ = _number_tokens(f"{path}.{k}.{axis}", spec, float(xy["xy".index(axis)]))
            out.update({self._slot_index[name]: self.tok.id(token) for name, token in got.items()})
        return out

    def spell_waypoints(self, xy: np.ndarray, out: np.ndarray) -> None:
        """Write every waypoint's tokens for `xy` (K, 2) into the ids `out` (L,), clipped to the schema's
        range: the same ids as `waypoint_tokens` per waypoint, in a few array operations (the planner
        spells a draft trajectory per plan)."""
        xy = np.asarray(xy, dtype=float)
        for axis, (spec, positions, table) in enumerate(self._spelling()):
            if xy.shape != (len(positions), 2):
                raise ValueError(f"waypoints {xy.shape}, schema {self.schema.name} has ({len(positions)}, 2)")
            if spec.kind == "bins":
                idx, _ = _quantizer(spec).encode(xy[:, axis])
                out[positions[:, 0]] = table["bins"][idx]
                continue
            negative, digits, _ = digits_encode_array(xy[:, axis], spec.int_digits, spec.frac_digits, spec.signed)
            out[positions[:, : digits.shape[1]]] = table["digits"][digits]
            if spec.signed:
                out[positions[:, -1]] = np.where(negative, table["sign"][1], table["sign"][0])

    def _spelling(self) -> list[tuple[NumberSpec, np.ndarray, dict[str, np.ndarray]]]:
        """Per axis: its spec, the output positions of each waypoint's tokens (K, n: digits most
        significant first, then the sign; or the one bin) and the token ids of bins, digits and signs."""
        if self._spelling_cache is None:
            path, f = self._waypoint_path()
            axes = []
            for axis, spec in (("x", f.x), ("y", f.y)):
                if spec.kind == "bins":
                    names = [[f"{path}.{k}.{axis}"] for k in range(f.count)]
                    table = {"bins": np.array([self.tok.id(bin_token(i)) for i in range(spec.count)])}
                else:
                    parts = [f"d{i}" for i in range(spec.int_digits)] + [f"f{i}" for i in range(spec.frac_digits)]
                    parts += ["sign"] if spec.signed else []
                    names = [[f"{path}.{k}.{axis}.{q}" for q in parts] for k in range(f.count)]
                    table = {"digits": np.array([self.tok.id(str(d)) for d in range(10)])}
                    if spec.signed:
                        table["sign"] = np.array([self.tok.id("+"), self.tok.id("-")])
                positions = np.array([[self._slot_index[n] for n in row] for row in names])
                axes.append((spec, positions, table))
            self._spelling_cache = axes
        return self._spelling_cache

    def to_text(self, ids: np.ndarray) -> str:
        """The token sequence as one readable line (scaffold and values)."""
        return " ".join(self.tok.decode(ids))


def _single_value(sec: SectionSpec) -> bool:
    return len(sec.fields) == 1 and sec.fields[0].type in ("text", "waypoints")


def _number_tokens(path: str, spec: NumberSpec, value: float) -> tuple[dict[str, str], bool]:
    if spec.kind == "bins":
        idx, clipped = _quantizer(spec).encode(np.array([value]))
        return {path: bin_token(int(idx[0]))}, bool(clipped[0])
    sign, digits, clipped = digits_encode(float(value), spec.int_digits, spec.frac_digits, spec.signed)
    out = {f"{path}.d{i}": str(d) for i, d in enumerate(digits[: spec.int_digits])}
    out.update({f"{path}.f{i}": str(d) for i, d in enumerate(digits[spec.int_digits :])})
    if spec.signed:
        out[f"{path}.sign"] = sign
    return out, bool(clipped)


def _number_value(path: str, spec: NumberSpec, tokens: dict[str, str]) -> tuple[float, bool]:
    """Parse a number's tokens; invalid tokens count as 0 and flag the value invalid."""
    if spec.kind == "bins":
        t = tokens[path]
        ok = t.startswith("<bin_") and t.endswith(">") and t[5:-1].isdigit() and int(t[5:-1]) < spec.count
        idx = int(t[5:-1]) if ok else 0
        return float(_quantizer(spec).decode(np.array([idx]))[0]), ok
    names = [f"{path}.d{i}" for i in range(spec.int_digits)] + [f"{path}.f{i}" for i in range(spec.frac_digits)]
    raw = [tokens[n] for n in names]
    ok = all(len(t) == 1 and t.isdigit() for t in raw)
    digits = [int(t) if len(t) == 1 and t.isdigit() else 0 for t in raw]
    sign = "+"
    if spec.signed:
        sign = tokens[f"{path}.sign"]
        ok &= sign in ("+", "-")
        sign = sign if sign in ("+", "-") else "+"
    return float(digits_decode(sign, digits, spec.int_digits, spec.frac_digits)), ok
