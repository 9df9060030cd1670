"""The per-image vision-token cache: exact lookups, whole frames encoded together, bounded size."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from ddrive_ros.runtime.view_cache import ViewTokenCache


def frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (3, 8, 10, 3), dtype=np.uint8) for _ in range(n)]


class Encoder:
    """Tokens that identify the image (its pixel sum) and count the calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        assert frame.shape[0] == 3
        self.calls += 1
        return frame.reshape(3, -1).sum(1, dtype=np.float64)[:, None, None] * np.ones((3, 2, 4))


def test_a_frame_seen_again_is_not_encoded_again():
    cache, enc = ViewTokenCache(3), Encoder()
    a, b, c = frames(3)
    first = cache.tokens(np.concatenate([a, b]), enc)
    assert enc.calls == 2 and (cache.hits, cache.misses) == (0, 2)
    second = cache.tokens(np.concatenate([b, c]), enc)
    assert enc.calls == 3 and (cache.hits, cache.misses) == (1, 3)
    assert np.array_equal(second[:3], first[3:])
    assert np.array_equal(second, np.concatenate([enc(b), enc(c)]))


def test_a_frame_with_one_new_camera_is_encoded_whole():
    """The three cameras of a frame go through the encoder together, so reused and fresh tokens come
    from the same computation."""
    cache, enc = ViewTokenCache(3), Encoder()
    a, b = frames(2)
    cache.tokens(np.concatenate([a, b]), enc)
    changed = b.copy()
    changed[2, 0, 0, 0] ^= 1
    out = cache.tokens(np.concatenate([a, changed]), enc)
    assert enc.calls == 3
    assert np.array_equal(out[3:], enc(changed))


def test_a_checksum_collision_is_not_a_hit(monkeypatch):
    """Keys are CRC-32s; a hit needs every byte equal, so two images with the same key stay apart."""
    cache, enc = ViewTokenCache(3), Encoder()
    a, b = frames(2)
    monkeypatch.setattr(zlib, "crc32", lambda data: 7)  # every image collides
    out_a = cache.tokens(np.concatenate([a, a]), enc)
    out_b = cache.tokens(np.concatenate([b, b]), enc)
    assert np.array_equal(out_b, np.concatenate([enc(b), enc(b)]))
    assert not np.array_equal(out_a, out_b)
    assert np.array_equal(cache.tokens(np.concatenate([a, b]), enc), np.concatenate([out_a[:3], out_b[:3]]))


def test_the_cache_stays_within_its_capacity():
    cache, enc = ViewTokenCache(3, capacity=6), Encoder()
    fs = frames(5)
    for i in range(4):
        cache.tokens(np.concatenate([fs[i], fs[i + 1]]), enc)
    assert cache._size <= 6
    calls = enc.calls
    cache.tokens(np.concatenate([fs[0], fs[4]]), enc)  # frame 0 was evicted, frame 4 is kept
    assert enc.calls == calls + 1


def test_bad_shapes_are_refused():
    cache = ViewTokenCache(3)
    with pytest.raises(ValueError, match="frames"):
        cache.tokens(np.zeros((4, 8, 10, 3), np.uint8), Encoder())
    with pytest.raises(ValueError, match="capacity"):
        ViewTokenCache(3, capacity=4)
