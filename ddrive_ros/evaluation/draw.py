"""One drawing module (OpenCV, RGB uint8 images) for every picture of a plan: a bird's-eye view,
plans projected into camera images, and the two side by side. Used by `ddrive eval`, `ddrive
replay` and the closed-loop simulator; it knows nothing of where the data came from.

Colours: plan red, ground truth / expert green, rollouts light blue, waypoints amber, other road
users grey boxes, lanes dark grey. The bird's-eye view puts the ego at the bottom centre, x
forward (up), y left (left).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from ddrive_ros.camera import CameraModel

PLAN = (235, 50, 50)
TRUTH = (40, 200, 40)
ROLLOUT = (120, 160, 255)
DRAFT = (255, 140, 0)
WAYPOINT = (255, 190, 0)
AGENT = (170, 170, 170)
LANE = (85, 85, 85)
EGO = (230, 230, 230)
TEXT = (235, 235, 235)
BACKGROUND = (28, 28, 28)


@dataclass
class Box:
    """An oriented box in the ego frame: centre (x, y), heading, half length and half width."""

    x: float
    y: float
    yaw: float
    half_length: float
    half_width: float

    def corners(self) -> np.ndarray:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]], dtype=float) * [self.half_length, self.half_width]
        return local @ np.array([[c, s], [-s, c]]) + [self.x, self.y]


@dataclass
class Scene:
    """What a bird's-eye view shows, all in the ego frame at the plan's stamp (metres)."""

    plan: np.ndarray | None = None  # (K, 2)
    truth: np.ndarray | None = None  # (K, 2) expert / recorded future
    rollouts: Sequence[np.ndarray] = ()
    draft: np.ndarray | None = None  # (K, 2) the plan before reflection (orange, dashed look: thin)
    waypoints: np.ndarray | None = None  # (M, 2) decoded waypoints
    agents: Sequence[Box] = ()
    lanes: Sequence[np.ndarray] = ()  # polylines (N, 2)
    ego: Box | None = None  # the ego's own box (default: a 4.6 x 1.9 m car at the origin)
    title: str = ""
    lines: list[str] = field(default_factory=list)  # text under the title


def bev(scene: Scene, size: int = 320, forward_m: float = 60.0) -> np.ndarray:
    """Bird's-eye view, `size` px square, covering `forward_m` ahead and forward_m / 2 to each side."""
    img = np.full((size, size, 3), BACKGROUND, np.uint8)
    m_per_px = forward_m / size
    origin = np.array([size / 2.0, size - 0.12 * size])

    def px(xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        return np.round(np.stack([origin[0] - xy[:, 1] / m_per_px, origin[1] - xy[:, 0] / m_per_px], 1)).astype(np.int32)

    for d in range(-10, int(forward_m) + 1, 10):  # 10 m grid lines
        y = int(origin[1] - d / m_per_px)
        cv2.line(img, (0, y), (size, y), (45, 45, 45), 1)
    for lane in scene.lanes:
        if len(lane) >= 2:
            cv2.polylines(img, [px(lane)], False, LANE, 1, cv2.LINE_AA)
    for box in scene.agents:
        cv2.fillPoly(img, [px(box.corners())], AGENT, cv2.LINE_AA)
    ego = scene.ego or Box(1.3, 0.0, 0.0, 2.3, 0.95)
    cv2.fillPoly(img, [px(ego.corners())], EGO, cv2.LINE_AA)
    if scene.truth is not None and len(scene.truth):
        cv2.polylines(img, [px(np.vstack([[0, 0], scene.truth]))], False, TRUTH, 2, cv2.LINE_AA)
    for r in scene.rollouts:
        cv2.polylines(img, [px(np.vstack([[0, 0], np.asarray(r)[:, :2]]))], False, ROLLOUT, 1, cv2.LINE_AA)
    if scene.draft is not None and len(scene.draft):
        cv2.polylines(img, [px(np.vstack([[0, 0], np.asarray(scene.draft)[:, :2]]))], False, DRAFT, 2, cv2.LINE_AA)
    if scene.plan is not None and len(scene.plan):
        cv2.polylines(img, [px(np.vstack([[0, 0], scene.plan]))], False, PLAN, 2, cv2.LINE_AA)
    if scene.waypoints is not None:
        for u, v in px(scene.waypoints):
            cv2.circle(img, (int(u), int(v)), 3, WAYPOINT, -1, cv2.LINE_AA)
    y = 14
    for text in [scene.title, *scene.lines]:
        if text:
            cv2.putText(img, text, (5, y), cv2.FONT_HERSHEY_SIMPLEX, 0.38, TEXT, 1, cv2.LINE_AA)
            y += 14
    return img


def project_paths(image: np.ndarray, camera: CameraModel, paths: Sequence[tuple[np.ndarray, tuple[int, int, int]]],
                  thickness: int = 1) -> np.ndarray:
    """The image with ego-frame ground paths ((K, 2) at z = 0) drawn through the camera model. The
    camera model's resolution may differ from the image's (a downscaled input): pixels are scaled."""
    out = np.ascontiguousarray(image).copy()
    sx, sy = out.shape[1] / camera.width, out.shape[0] / camera.height
    for xy, colour in paths:
        if xy is None or len(xy) < 2:
            continue
        pts = np.concatenate([np.asarray(xy, dtype=float)[:, :2], np.zeros((len(xy), 1))], axis=1)
        uv, front = camera.project(pts)
        uv = uv[front] * [sx, sy]
        if len(uv) >= 2 and np.all(np.isfinite(uv)):
            cv2.polylines(out, [np.clip(uv, -1e4, 1e4).round().astype(np.int32)], False, colour, thickness, cv2.LINE_AA)
    return out


def camera_strip(images: Sequence[np.ndarray | None], cameras: Sequence[CameraModel | None],
                 paths: Sequence[tuple[np.ndarray, tuple[int, int, int]]], height: int = 192) -> np.ndarray:
    """The cameras side by side at `height` px, each with the paths projected where a camera model
    is known (a missing image is a black tile)."""
    tiles = []
    for img, cam in zip(images, cameras):
        if img is None:
            img = np.zeros((height, height * 5 // 3, 3), np.uint8)
        elif cam is not None:
            img = project_paths(img, cam, paths)
        tiles.append(cv2.resize(img, (int(round(img.shape[1] * height / img.shape[0])), height),
                                interpolation=cv2.INTER_NEAREST))
    return np.concatenate(tiles, axis=1)


def side_by_side(*panels: np.ndarray) -> np.ndarray:
    """Panels left to right, top-aligned, padded to the tallest."""
    h = max(p.shape[0] for p in panels)
    padded = [np.concatenate([p, np.full((h - p.shape[0], p.shape[1], 3), BACKGROUND, np.uint8)], 0) for p in panels]
    return np.concatenate(padded, axis=1)


def stacked(*panels: np.ndarray) -> np.ndarray:
    """Panels top to bottom, left-aligned, padded to the widest."""
    w = max(p.shape[1] for p in panels)
    padded = [np.concatenate([p, np.full((p.shape[0], w - p.shape[1], 3), BACKGROUND, np.uint8)], 1) for p in panels]
    return np.concatenate(padded, axis=0)


def label_strip(text: str, width: int, height: int = 22) -> np.ndarray:
    """A dark strip of `width` px with one line of text (a row or column heading)."""
    img = np.full((height, width, 3), BACKGROUND, np.uint8)
    cv2.putText(img, text, (5, height - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.45, TEXT, 1, cv2.LINE_AA)
    return img


def write_png(path: str | Path, rgb: np.ndarray) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}")
    return path


def write_video(path: str | Path, frames: Sequence[np.ndarray], fps: float = 10.0) -> Path:
    """RGB frames of one size -> an MP4 (OpenCV's mp4v codec). Raises when the writer cannot open."""
    path = Path(path)
    if not frames:
        raise ValueError(f"no frames for {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
    if not writer.isOpened():
        raise OSError(f"OpenCV could not open an mp4v writer for {path}")
    try:
        for f in frames:
            if f.shape[:2] != (h, w):
                raise ValueError(f"frame size {f.shape[:2]} differs from the first frame's {(h, w)} in {path}")
            writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    return path


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str = "", width: int = 560,
              bar_height: int = 22, value_range: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Horizontal bars, one per label, with the value written at the end of each bar."""
    pad, label_w = 8, max(170, width - 390)
    h = pad * 3 + 18 + len(labels) * (bar_height + 6)
    img = np.full((h, width, 3), BACKGROUND, np.uint8)
    cv2.putText(img, title, (pad, pad + 12), cv2.FONT_HERSHEY_SIMPLEX, 0.45, TEXT, 1, cv2.LINE_AA)
    lo, hi = value_range
    span = width - label_w - 3 * pad - 40
    for i, (label, v) in enumerate(zip(labels, values)):
        y = pad * 2 + 18 + i * (bar_height + 6)
        cv2.putText(img, label[:max(26, (label_w - pad) // 7)], (pad, y + bar_height - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.4, TEXT, 1, cv2.LINE_AA)
        frac = 0.0 if not np.isfinite(v) else float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))
        x0 = label_w + pad
        cv2.rectangle(img, (x0, y), (x0 + int(frac * span), y + bar_height), PLAN, -1)
        cv2.rectangle(img, (x0, y), (x0 + span, y + bar_height), LANE, 1)
        cv2.putText(img, f"{v:.3f}", (x0 + span + 6, y + bar_height - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.4, TEXT, 1,
                    cv2.LINE_AA)
    return img
