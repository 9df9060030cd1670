"""Samples (from the world or from bags) -> the tensors training consumes."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np
import torch

from ddrive_ros.evaluation.metrics import constant_velocity_prediction
from ddrive_ros.model.config import ModelConfig
from ddrive_ros.model.vision import ego_features
from ddrive_ros.plan import Plan
from ddrive_ros.scaffold.codec import Codec

log = logging.getLogger(__name__)


def target_plan(sample, codec: Codec) -> Plan:
    """The plan a schema should produce for a sample: waypoints from the sample's future at the
    schema's times; the other sections from its labels where it has them."""
    wf = codec.schema.waypoint_field()
    times = wf.dt * np.arange(1, wf.count + 1)
    xy = future_at(sample, times)
    labels = getattr(sample, "labels", None)
    has = getattr(sample, "has_labels", {})
    plan = Plan(codec.schema.name, xy, times)
    if labels is not None:
        names = codec.schema.section_names
        if "critical_objects" in names and has.get("critical_objects", True) and labels.critical_objects:
            plan.critical_objects = dict(labels.critical_objects)
        if "explanation" in names and has.get("explanation", True):
            plan.explanation = labels.explanation
        if "future_meta_behavior" in names and has.get("future_meta_behavior", True):
            plan.meta = labels.meta
    return plan


@dataclass
class TensorData:
    images: torch.Tensor  # (N, 6, H, W, 3) uint8 at model size
    ego: torch.Tensor  # (N, F)
    nav: torch.Tensor  # (N,)
    ids: torch.Tensor  # (N, L)
    labelled: torch.Tensor  # (N, L) bool
    clipped: int = 0
    surprise: torch.Tensor | None = None  # (N,) metres: how far the future departs from constant velocity
    slowdown: torch.Tensor | None = None  # (N,) 0..1: the share of its speed the future sheds (brake_share())
    pull_away: torch.Tensor | None = None  # (N,) 0..1: how much a standing ego's future gets going (start_share())
    recovery: torch.Tensor | None = None  # (N,) 0..1: how much a braking ego's future drives on (recover_share())
    self_ids: torch.Tensor | None = None  # (N, L) the starting model's own greedy plans (training/self_targets.py)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.images[idx], self.ego[idx], self.nav[idx], self.ids[idx], self.labelled[idx]

    def self_batch(self, idx: torch.Tensor) -> torch.Tensor:
        if self.self_ids is None:
            raise ValueError("self_targets > 0 needs the starting model's greedy plans (TensorData.self_ids)")
        return self.self_ids[idx]


def observation_tensors(observations, cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Observations -> (images (N, 6, H, W, 3) uint8 at model size, ego features (N, F), nav commands):
    the model inputs of supervised training (`tensorize`) and RL (`training/grpo.py`)."""
    h, w = cfg.vision.image_size
    images, ego, nav = [], [], []
    for o in observations:
        frames = o.images.reshape(-1, *o.images.shape[2:])
        if frames.shape[1:3] != (h, w):
            frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])
        images.append(frames)
        ego.append(ego_features(torch.tensor([o.speed]), torch.tensor([o.accel]), torch.tensor([o.yaw_rate]),
                                torch.as_tensor(np.asarray(o.past_xy, dtype=np.float32))[None], cfg.ego_accel)[0])
        nav.append(o.nav_command)
    return torch.from_numpy(np.stack(images)), torch.stack(ego).float(), nav


def tensorize(samples, codec: Codec, cfg: ModelConfig) -> TensorData:
    tok = codec.tok
    ids, lab = [], []
    clipped = 0
    for s in samples:
        enc = codec.encode(target_plan(s, codec))
        clipped += int(enc.clipped)
        ids.append(enc.ids)
        lab.append(enc.labelled)
    if clipped:
        log.info("%d of %d samples had trajectory values outside the quantisation range (clipped)", clipped, len(ids))
    images, ego, nav = observation_tensors([s.observation for s in samples], cfg)
    wf = codec.schema.waypoint_field()
    times = wf.dt * np.arange(1, wf.count + 1)
    surprise = torch.tensor([cv_surprise(s, times) for s in samples], dtype=torch.float32)
    slowdown = torch.tensor([brake_share(s) for s in samples], dtype=torch.float32)
    pull_away = torch.tensor([start_share(s) for s in samples], dtype=torch.float32)
    recovery = torch.tensor([recover_share(s) for s in samples], dtype=torch.float32)
    return TensorData(images, ego, torch.tensor([tok.id(f"<nav:{n}>") for n in nav]),
                      torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(lab)), clipped, surprise, slowdown,
                      pull_away, recovery)


def cv_surprise(sample, times: np.ndarray) -> float:
    """Mean distance (m) between a sample's future and constant velocity (speed and yaw rate held) at
    `times`: near zero when cruising, large where the scene changes the motion (a curve's start, a stop
    sign, a braking lead vehicle, a turn), the situations a planner must read from its cameras."""
    obs = sample.observation
    cv = constant_velocity_prediction(obs.speed, obs.yaw_rate, times)
    return float(np.linalg.norm(future_at(sample, times) - cv, axis=1).mean())


def brake_share(sample, floor_mps: float = 1.0) -> float:
    """The share of its present speed the sample's future sheds: 1 - (lowest speed along the future) /
    max(present speed, floor_mps), in [0, 1]. 0 when cruising or speeding up; near 1 where the future stops
    (behind a queue, at a stop line), also from a crawl (the floor keeps a 0.3 m/s creep that stops at 1, not
    undefined). The speeds are the future's segment speeds from the origin at t = 0."""
    v_min = float(np.min(_segment_speeds(sample)))
    return float(np.clip(1.0 - v_min / max(float(sample.observation.speed), floor_mps), 0.0, 1.0))


def _segment_speeds(sample) -> np.ndarray:
    """The future's segment speeds (m/s) from the origin at t = 0."""
    t = np.concatenate([[0.0], np.asarray(sample.future_times, dtype=float)])
    xy = np.vstack([[0.0, 0.0], np.asarray(sample.future_xy, dtype=float)[:, :2]])
    dt = np.diff(t)
    if np.any(dt <= 0):
        raise ValueError(f"sample future_times must increase from t0, got {sample.future_times!r}")
    return np.linalg.norm(np.diff(xy, axis=0), axis=1) / dt


START_STANDING_MPS = 1.0  # m/s: a sample slower than this stands (start_share)
START_FULL_MPS = 4.0  # m/s: a future that reaches this speed is a full pull-away (start_share 1)


def start_share(sample) -> float:
    """How much a standing ego's future gets going, in [0, 1]: 0 unless the present speed is below
    START_STANDING_MPS; then the future's top segment speed over START_FULL_MPS, clipped. Near 1 where the ego
    pulls away from a stop line, a queue or a light (the states where the learned planner stays put while its own
    meta says ACCELERATE, docs/closed_loop.md), 0 where it waits on."""
    if float(sample.observation.speed) >= START_STANDING_MPS:
        return 0.0
    return float(np.clip(np.max(_segment_speeds(sample)) / START_FULL_MPS, 0.0, 1.0))


RECOVER_BRAKING_MPS2 = -0.5  # m/s^2: a sample whose acceleration input is below this brakes now (recover_share)
# m/s: a slower sample is not rolling on: a halt at a stop line and the pull-away after it are start_share's case, and
# weighting them taught the model to run stop signs (round 16; round 20's first stage, which counted them: 5 -> 11)
RECOVER_ROLLING_MPS = 2.0
RECOVER_SLACK_MPS = 1.0  # m/s: a future that runs slower than the present speed less this slows on (a stop): not one
RECOVER_FULL_MPS = 2.0  # m/s: a future that gets this much faster than the present is a full recovery


def recover_share(sample) -> float:
    """How much a braking ego's future drives on, in [0, 1]: 0 unless the ego rolls (at RECOVER_ROLLING_MPS or
    faster) and brakes now (its acceleration input below RECOVER_BRAKING_MPS2) and its future never runs slower than
    the present speed less RECOVER_SLACK_MPS (a future that slows on is a stop, `brake_share`'s case); then how far
    the future's top segment speed rises above the present, over RECOVER_FULL_MPS, clipped. Near 1 in the states a
    brake repair leaves the ego in, braked for a road user that has gone, where the expert's label drives on and the
    learned planner carries its own braking on to a stop (docs/training.md, "Round 20")."""
    v0 = float(sample.observation.speed)
    if v0 < RECOVER_ROLLING_MPS or float(sample.observation.accel) >= RECOVER_BRAKING_MPS2:
        return 0.0
    v = _segment_speeds(sample)
    if float(np.min(v)) < v0 - RECOVER_SLACK_MPS:
        return 0.0
    return float(np.clip((float(np.max(v)) - v0) / RECOVER_FULL_MPS, 0.0, 1.0))


def future_at(sample, times: np.ndarray) -> np.ndarray:
    """The sample's future ego-frame positions (K, 2) interpolated at `times`."""
    fut_t = np.asarray(sample.future_times, dtype=float)
    fut = np.asarray(sample.future_xy, dtype=float)
    return np.stack([np.interp(times, fut_t, fut[:, 0]), np.interp(times, fut_t, fut[:, 1])], 1)


def batch_prompts(model, images: torch.Tensor, ego: torch.Tensor, nav: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Prompt embeddings of a training batch (uint8 images at model size, ego features, nav token ids),
    with gradients through the vision encoder: the one prompt build of supervised training and RL."""
    from ddrive_ros.runtime.torch_backend import images_to_input

    bos = torch.full_like(nav, bos_id)
    return model.prompt_embeds(model.encode_images(images_to_input(images, torch.float32)), ego, bos, nav)
