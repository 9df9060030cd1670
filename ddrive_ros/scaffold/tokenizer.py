"""Domain tokenizer: one vocabulary for prompt and plan, stored as one JSON file.

Token ids exist only here: everything else asks the tokenizer (`tok.id("<mask>")`,
`tok.mask_id`). The file travels with every checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from ddrive_ros.observation import NAV_COMMANDS
from ddrive_ros.scaffold.schema import STRUCTURE, Schema

SPECIALS = ("<pad>", "<mask>", "<bos>", "<eos>", "<img>", "<ego>", "<expad>", "<unk>")
FORMAT_VERSION = 1


def nav_token(command: str) -> str:
    return f"<nav:{command}>"


class Tokenizer:
    def __init__(self, tokens: Iterable[str]):
        self.tokens: list[str] = list(tokens)
        self._ids = {t: i for i, t in enumerate(self.tokens)}
        if len(self._ids) != len(self.tokens):
            raise ValueError("tokenizer has duplicate tokens")
        missing = [s for s in SPECIALS if s not in self._ids]
        if missing:
            raise ValueError(f"tokenizer lacks special tokens {missing}")
        self.pad_id = self._ids["<pad>"]
        self.mask_id = self._ids["<mask>"]
        self.bos_id = self._ids["<bos>"]
        self.eos_id = self._ids["<eos>"]
        self.img_id = self._ids["<img>"]
        self.ego_id = self._ids["<ego>"]
        self.expad_id = self._ids["<expad>"]
        self.unk_id = self._ids["<unk>"]

    @classmethod
    def build(cls, schema: Schema) -> "Tokenizer":
        pieces = list(SPECIALS) + list(STRUCTURE) + [nav_token(c) for c in NAV_COMMANDS]
        pieces += schema.vocabulary_pieces()
        seen: dict[str, None] = {}
        for p in pieces:
            seen.setdefault(p, None)
        return cls(seen)

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        return self._ids.get(token, self.unk_id)

    def has(self, token: str) -> bool:
        return token in self._ids

    def token(self, i: int) -> str:
        return self.tokens[i] if 0 <= i < len(self.tokens) else "<unk>"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.id(t) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.token(int(i)) for i in ids]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"format": FORMAT_VERSION, "tokens": self.tokens}, indent=0))

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file {path} not found")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"tokenizer file {path} is not valid JSON: {e}") from e
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("tokens"), list):
            raise ValueError(f"tokenizer file {path} has an unknown format (expected format {FORMAT_VERSION})")
        return cls(data["tokens"])

    def check_covers(self, schema: Schema) -> None:
        """Raise if the schema needs tokens this tokenizer lacks (checkpoint/schema mismatch)."""
        missing = [p for p in schema.vocabulary_pieces() if p not in self._ids]
        if missing:
            raise ValueError(f"tokenizer lacks {len(missing)} tokens of schema {schema.name}, e.g. {missing[:5]}")
