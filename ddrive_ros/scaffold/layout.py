"""Positions of one schema at one block size, as arrays the model and decoders index with.

Blocks are section-aligned: section s with E_s editable positions gets
ceil(E_s / block_size) blocks, none crossing a section boundary. Block k of a
section starts at its k-th group of editable positions (the first block also
holds the section's leading scaffold) and runs up to the next block, so the
scaffold between values rides along in the block that precedes it and is fed,
never predicted. `window` is the longest block in positions: every block
forward has that static length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ddrive_ros.scaffold.schema import Schema, Slot
from ddrive_ros.scaffold.tokenizer import Tokenizer


@dataclass(frozen=True)
class Block:
    index: int
    section: int
    start: int  # template position, inclusive
    end: int  # exclusive

    @property
    def length(self) -> int:
        return self.end - self.start


class Layout:
    def __init__(self, schema: Schema, tokenizer: Tokenizer, block_size: int | None = None):
        tokenizer.check_covers(schema)
        self.schema = schema
        self.tokenizer = tokenizer
        self.block_size = int(block_size or schema.default_block_size)
        if self.block_size < 1:
            raise ValueError(f"block size must be >= 1, got {self.block_size}")
        tmpl = schema.template()
        self.length = len(tmpl)
        self.slots: list[Slot | None] = [item if isinstance(item, Slot) else None for item in tmpl]
        self.editable = np.array([s is not None for s in self.slots])
        self.template_ids = np.array(
            [tokenizer.mask_id if isinstance(item, Slot) else tokenizer.id(item) for item in tmpl], dtype=np.int64
        )
        self.section = np.zeros(self.length, dtype=np.int64)
        self.block = np.zeros(self.length, dtype=np.int64)
        self.blocks: list[Block] = []
        for si, (a, b) in enumerate(schema.section_spans()):
            self.section[a:b] = si
            edit = np.flatnonzero(self.editable[a:b]) + a
            if len(edit) == 0:
                raise ValueError(f"section {schema.sections[si].name} has no editable positions")
            n = math.ceil(len(edit) / self.block_size)
            for k in range(n):
                start = a if k == 0 else int(edit[k * self.block_size])
                end = int(edit[(k + 1) * self.block_size]) if k + 1 < n else b
                self.block[start:end] = len(self.blocks)
                self.blocks.append(Block(len(self.blocks), si, start, end))
        self.window = max(b.length for b in self.blocks)
        action_section = schema.section_names.index("trajectory") if "trajectory" in schema.section_names else -1
        self.action = self.section == action_section
        # allowed-token groups: one boolean row over the vocabulary per distinct group
        names: list[str] = []
        rows: list[np.ndarray] = []
        self.group = np.full(self.length, -1, dtype=np.int64)
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            if slot.group not in names:
                row = np.zeros(len(tokenizer), dtype=bool)
                row[[tokenizer.id(t) for t in slot.allowed]] = True
                names.append(slot.group)
                rows.append(row)
            self.group[i] = names.index(slot.group)
        self.group_names = names
        self.group_allowed = np.stack(rows)  # (G, V)

    @cached_property
    def allowed(self) -> np.ndarray:
        """(L, V) bool: tokens allowed at each position (scaffold: only its own token)."""
        out = np.zeros((self.length, len(self.tokenizer)), dtype=bool)
        out[self.editable] = self.group_allowed[self.group[self.editable]]
        out[~self.editable, self.template_ids[~self.editable]] = True
        return out

    def section_blocks(self, section: int) -> list[Block]:
        return [b for b in self.blocks if b.section == section]

    def editable_count(self, section: int | None = None) -> int:
        mask = self.editable if section is None else self.editable & (self.section == section)
        return int(mask.sum())
