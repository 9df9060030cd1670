"""Vision tokens per camera image, kept for the images a stream shows again.

An observation holds two frames per camera, t0 - 0.5 s and t0 (`timeline.FRAME_HISTORY_S`). On a
stream planned at the camera rate, the history frame of one plan is the current frame of a plan
five ticks earlier: the same image, so the same vision tokens. The vision encoder is a function of
each image alone before the camera/frame embedding (`VisionEncoder.view_tokens`), so its tokens are
kept by image content and only the frames not seen yet are encoded.

Lookups are exact: the key is a CRC-32 of the pixels and a hit is confirmed by comparing every byte
with the stored copy, so a collision re-encodes instead of reusing another image's tokens. Each frame
(its three cameras) is encoded as one batch of fixed size whether or not the other frame was a hit,
so a token computed now and one reused later come from the same computation, bit for bit.
"""
from __future__ import annotations

import zlib
from collections import OrderedDict
from typing import Callable

import numpy as np

# two frames of three cameras for the plans of the last FRAME_HISTORY_S at 10 Hz, with room to spare
DEFAULT_CAPACITY = 48


class ViewTokenCache:
    """uint8 images (frames * cameras, H, W, 3), in frame-major order -> their view tokens
    (frames * cameras, T, D), encoding one frame's cameras at a time through `encode`."""

    def __init__(self, cameras: int, capacity: int = DEFAULT_CAPACITY):
        if cameras < 1 or capacity < 2 * cameras:
            raise ValueError(f"a view-token cache needs cameras >= 1 and capacity >= 2 frames, got {cameras}, {capacity}")
        self.cameras = cameras
        self.capacity = capacity
        self._entries: OrderedDict[int, list[tuple[np.ndarray, np.ndarray]]] = OrderedDict()
        self._size = 0
        self.hits = 0  # frames whose tokens were reused
        self.misses = 0  # frames encoded

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0

    def _find(self, image: np.ndarray) -> tuple[int, np.ndarray | None]:
        key = zlib.crc32(image.data)
        for stored, tokens in self._entries.get(key, ()):
            if np.array_equal(stored, image):
                self._entries.move_to_end(key)
                return key, tokens
        return key, None

    def _keep(self, key: int, image: np.ndarray, tokens: np.ndarray) -> None:
        self._entries.setdefault(key, []).append((image.copy(), tokens))
        self._entries.move_to_end(key)
        self._size += 1
        while self._size > self.capacity:
            _, evicted = self._entries.popitem(last=False)
            self._size -= len(evicted)

    def tokens(self, images: np.ndarray, encode: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """`encode` takes one frame's uint8 images (cameras, H, W, 3) and returns (cameras, T, D)."""
        if images.ndim != 4 or images.shape[0] % self.cameras:
            raise ValueError(f"view-token cache takes (frames * {self.cameras}, H, W, 3) images, got {images.shape}")
        images = np.ascontiguousarray(images)
        out = []
        for f in range(images.shape[0] // self.cameras):
            frame = images[f * self.cameras:(f + 1) * self.cameras]
            found = [self._find(img) for img in frame]
            if all(tok is not None for _, tok in found):
                self.hits += 1
                out.extend(tok for _, tok in found)
                continue
            self.misses += 1
            encoded = encode(frame)
            if encoded.shape[0] != self.cameras:
                raise ValueError(f"the view encoder returned {encoded.shape[0]} images' tokens for {self.cameras}")
            for (key, known), img, tok in zip(found, frame, encoded):
                if known is None:  # a camera already kept (its frame partly new) is not kept twice
                    self._keep(key, img, tok)
            out.extend(encoded)
        return np.stack(out)
