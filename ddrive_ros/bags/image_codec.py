"""Pixels <-> sensor_msgs Image / CompressedImage, shared by the bag tools and the ROS node.

The conversions work on plain fields (encoding, height, width, step, data bytes), so they serve
rosbags typestore messages and rclpy messages alike; nothing here imports rclpy. Builders of
rosbags messages (`image_to_msg`, `compressed_to_msg`) take a typestore.

Accepted raw encodings: rgb8, bgr8, mono8 (grey is replicated to RGB). Everything else, a step
that is not width * channels, or a data length that is not step * height raises
`ImageFormatError` (a ValueError) whose `reason` names the problem for drop counters.
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1, "8uc3": 3, "8uc1": 1}
SUPPORTED_ENCODINGS = tuple(CHANNELS)
WRITABLE_ENCODINGS = ("rgb8", "bgr8", "mono8")
JPEG_FORMAT = "rgb8; jpeg compressed bgr8"  # image_transport's compressed format string
PNG_FORMAT = "rgb8; png compressed bgr8"


class ImageFormatError(ValueError):
    """An image message whose pixels cannot be used. `reason` is a short key for counting:
    unsupported_encoding, bad_step (a row shorter than its pixels, or a step the data does not
    fit), bad_size (empty image, or data length != step * height), decode_failed (compressed)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _as_bytes_view(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data), dtype=np.uint8)


def check_raw(encoding: str, height: int, width: int, step: int, n_bytes: int) -> None:
    """Raise ImageFormatError unless the fields describe a usable image. Rows may be padded
    (step > width * channels), as camera drivers do for alignment."""
    enc = str(encoding).lower()
    if enc not in CHANNELS:
        raise ImageFormatError("unsupported_encoding",
                               f"unsupported encoding {encoding!r}; expected one of {SUPPORTED_ENCODINGS}")
    if height <= 0 or width <= 0:
        raise ImageFormatError("bad_size", f"image size {width}x{height} is empty")
    row = width * CHANNELS[enc]
    if step < row:
        raise ImageFormatError("bad_step", f"step {step} < width {width} * {CHANNELS[enc]} channels for {enc}")
    if n_bytes != step * height:
        reason = "bad_size" if step == row else "bad_step"
        raise ImageFormatError(reason, f"data has {n_bytes} bytes, expected step {step} * height {height}")


def raw_to_rgb(encoding: str, height: int, width: int, step: int, data: Any) -> np.ndarray:
    """(H, W, 3) uint8 RGB from raw image fields."""
    buf = _as_bytes_view(data)
    height, width, step = int(height), int(width), int(step)
    check_raw(encoding, height, width, step, buf.size)
    enc = str(encoding).lower()
    ch = CHANNELS[enc]
    img = buf.reshape(height, step)[:, : width * ch].reshape(height, width, ch)
    if enc in ("bgr8", "bgra8"):
        img = img[..., 2::-1]
    elif enc == "rgba8":
        img = img[..., :3]
    elif ch == 1:
        img = np.repeat(img, 3, axis=2)
    return np.ascontiguousarray(img)


def rgb_to_raw(rgb: np.ndarray, encoding: str = "rgb8") -> tuple[str, int, int, int, np.ndarray]:
    """(encoding, height, width, step, data uint8 1-D) of an RGB image in the given encoding."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected (H, W, 3) uint8 RGB, got {rgb.shape} {rgb.dtype}")
    enc = encoding.lower()
    if enc == "rgb8":
        px = rgb
    elif enc == "bgr8":
        px = rgb[..., ::-1]
    elif enc == "mono8":
        px = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)[..., None]
    else:
        raise ValueError(f"cannot encode to {encoding!r}; supported: {WRITABLE_ENCODINGS}")
    h, w, c = px.shape
    return enc, h, w, w * c, np.ascontiguousarray(px).reshape(-1)


_REDUCED = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8}


def reduction_for(full_hw: tuple[int, int], target_hw: tuple[int, int]) -> int:
    """The largest JPEG decode reduction (1, 2, 4, 8) that still leaves at least target_hw pixels:
    decoding at 1/k is several times cheaper than a full decode followed by a resize."""
    for k in (8, 4, 2):
        if full_hw[0] // k >= target_hw[0] and full_hw[1] // k >= target_hw[1]:
            return k
    return 1


def compressed_to_rgb(fmt: str, data: Any, reduce: int = 1) -> np.ndarray:
    """(H, W, 3) RGB from a CompressedImage's format and data (jpeg or png); `reduce` (1, 2, 4, 8)
    decodes at 1/reduce of the size (OpenCV's reduced decode; JPEG scales in the DCT)."""
    buf = _as_bytes_view(data)
    if buf.size == 0:
        raise ImageFormatError("decode_failed", "compressed image has no data")
    if reduce not in _REDUCED:
        raise ValueError(f"reduce must be one of {tuple(_REDUCED)}, got {reduce}")
    img = cv2.imdecode(buf, _REDUCED[reduce])
    if img is None:
        raise ImageFormatError("decode_failed", f"cv2.imdecode could not decode {buf.size} bytes (format {fmt!r})")
    return np.ascontiguousarray(img[..., ::-1])


def rgb_to_compressed(rgb: np.ndarray, fmt: str = "jpeg", quality: int = 90) -> tuple[str, np.ndarray]:
    """(format string, encoded bytes as uint8 1-D)."""
    bgr = np.ascontiguousarray(np.asarray(rgb)[..., ::-1])
    if fmt == "jpeg":
        ok, enc = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
        name = JPEG_FORMAT
    elif fmt == "png":
        ok, enc = cv2.imencode(".png", bgr)
        name = PNG_FORMAT
    else:
        raise ValueError(f"unknown compression {fmt!r}; use 'jpeg' or 'png'")
    if not ok:
        raise ValueError(f"cv2.imencode failed for {fmt}")
    return name, enc.reshape(-1)


def image_from_msg(msg: Any) -> np.ndarray:
    """RGB pixels of an Image or CompressedImage message (rosbags or rclpy). Raises ValueError."""
    if hasattr(msg, "encoding"):
        return raw_to_rgb(msg.encoding, msg.height, msg.width, msg.step, msg.data)
    if hasattr(msg, "format"):
        return compressed_to_rgb(msg.format, msg.data)
    raise ValueError(f"{type(msg).__name__} is neither an Image nor a CompressedImage")


# -- rosbags message builders (typestore: ddrive_ros.bags.io.typestore()) ---------------------------------------------------------------
def make_header(typestore, stamp_ns: int, frame_id: str):
    time_t = typestore.types["builtin_interfaces/msg/Time"]
    header_t = typestore.types["std_msgs/msg/Header"]
    return header_t(stamp=time_t(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000)),
                    frame_id=frame_id)


def stamp_to_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time (rosbags or rclpy field names)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def image_to_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str, typestore=None, encoding: str = "rgb8"):
    ts = typestore or _typestore()
    enc, h, w, step, data = rgb_to_raw(rgb, encoding)
    return ts.types["sensor_msgs/msg/Image"](header=make_header(ts, stamp_ns, frame_id), height=h, width=w,
                                             encoding=enc, is_bigendian=0, step=step, data=data)


def compressed_to_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str, typestore=None, fmt: str = "jpeg",
                      quality: int = 90):
    ts = typestore or _typestore()
    name, data = rgb_to_compressed(rgb, fmt, quality)
    return ts.types["sensor_msgs/msg/CompressedImage"](header=make_header(ts, stamp_ns, frame_id), format=name,
                                                       data=data)


def _typestore():
    from ddrive_ros.bags.io import typestore

    return typestore()
