"""One check for every training config block: a key the dataclass does not have is a typo, not a no-op."""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def from_checked_dict(cls: type[T], d: dict[str, Any] | None, what: str) -> T:
    """`cls(**d)` after checking that every key of `d` is a field of the dataclass `cls`."""
    d = dict(d or {})
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {what} keys {sorted(unknown)}; known: {sorted(known)}")
    return cls(**d)
