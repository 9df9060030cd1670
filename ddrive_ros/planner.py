"""Observation -> Plan. The one entry point shared by the ROS node, replay, evaluation and benchmarks."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.decoding import logit_bias
from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.reflect import REPAIRS, make_reflector
from ddrive_ros.decoding.strategies import make_strategy, uses_block_size_one
from ddrive_ros.kinematic_draft import kinematic_ids
from ddrive_ros.observation import Observation
from ddrive_ros.plan import Plan
from ddrive_ros.planner_options import PlannerOptions
from ddrive_ros.previous_plan import prior_ids
from ddrive_ros.reflection import safety
from ddrive_ros.reflection.safety import SafetyContext
from ddrive_ros.scaffold.codec import Codec
from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.speed_smoothing import (START_RELEASE_MPS, START_STANDING_MPS, follow_meta_speed, follows_meta,
                                       smooth_speed_profile, start_on_meta)
from ddrive_ros.timeline import OUTPUT_TIMES
from ddrive_ros.trajectory import jmt_interpolate, path_yaw_speed, to_trajectory_array

log = logging.getLogger(__name__)

PULL_AWAY_MAX_GAP_S = 1.0  # s: a pull-away goes on from the previous plan only if that plan is at most this old


class Planner:
    def __init__(self, bundle: ckpt.Bundle, options: PlannerOptions | None = None):
        self.options = opt = options or PlannerOptions()
        self.bundle = bundle
        self.schema, self.tokenizer, self.config = bundle.schema, bundle.tokenizer, bundle.config
        block_size = 1 if uses_block_size_one(opt.decoder) else (opt.block_size or self.config.block_size)
        self.layout = Layout(self.schema, self.tokenizer, block_size)
        self.codec = Codec(self.layout)
        self.strategy = make_strategy(opt.decoder, **opt.knobs)
        spec = bundle.calibration.get("logit_bias", {}) if opt.logit_bias is None else opt.logit_bias
        self.logit_bias = logit_bias.parse(spec, "logit_bias")  # {field: {value: offset}}, for the record
        self._bias_entries = logit_bias.entries(self.layout, self.logit_bias)
        make_reflector(opt.reflect, self.codec, SafetyContext(v0=0.0))  # an unknown mode fails here, not per plan
        if opt.safety_repair not in REPAIRS:
            raise ValueError(f"safety_repair must be one of {', '.join(REPAIRS)}, got {opt.safety_repair!r}")
        follows_meta(opt.follow_meta_speed, {})  # so does an unknown follow_meta_speed
        if opt.accel_clip is not None and not (len(opt.accel_clip) == 2 and opt.accel_clip[0] < opt.accel_clip[1]):
            raise ValueError(f"accel_clip must be (lo, hi) with lo < hi, got {opt.accel_clip!r}")
        if opt.reflect in ("autoedit", "both") and uses_block_size_one(opt.decoder):
            raise ValueError(f"reflect={opt.reflect} needs a block decoder: AutoEdit reads a drafted block in one "
                             f"bidirectional forward, and {opt.decoder} runs on one-token blocks (its greedy plan "
                             f"equals speculative's: use decoder speculative)")
        from ddrive_ros.runtime.factory import make_backend

        dtype = getattr(torch, opt.dtype)
        self.backend = make_backend(opt.backend, bundle.model, window=self.layout.window, max_rows=max(1, opt.rollouts, getattr(self.strategy, "tree", 1)),
                                    device=opt.device, dtype=dtype, **opt.backend_options)
        if hasattr(self.backend, "warmup"):
            # capture every step shape a plan uses now, so the first real plan pays no capture
            modes = (False,) if opt.decoder == "ar" else (True, False)
            captured = self.backend.warmup(self.layout, max(1, opt.rollouts), modes)
            log.info("%s backend: %d step graphs captured at start-up", self.backend.name, captured)
        self.bos = torch.tensor([self.tokenizer.bos_id])
        self._plans = 0
        self._previous: tuple[Plan, np.ndarray] | None = None  # the last plan and its ids: the next one's draft
        self._uses_prior = opt.draft_previous and getattr(self.strategy, "uses_prior", False)
        self._uses_kinematic = opt.draft_kinematic and getattr(self.strategy, "uses_prior", False)

    @classmethod
    def from_checkpoint(cls, path: str | Path | None = None, backend: str = "torch", decoder: str = "speculative",
                        **kwargs: Any) -> "Planner":
        """Load a checkpoint folder (or a shipped model name) and build its planner."""
        bundle = ckpt.load(path)
        return cls(bundle, PlannerOptions(backend=backend, decoder=decoder, **kwargs))

    # ------------------------------------------------------------------ inputs
    def _images(self, images: np.ndarray) -> torch.Tensor:
        h, w = self.config.vision.image_size
        frames = images.reshape(-1, *images.shape[2:])
        if frames.shape[1:3] != (h, w):
            frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])
        return torch.from_numpy(np.ascontiguousarray(frames)).view(1, -1, h, w, 3)

    def _ego(self, obs: Observation) -> torch.Tensor:
        f = lambda v: torch.tensor([float(v)], dtype=torch.float32)  # noqa: E731
        past = torch.as_tensor(np.asarray(obs.past_xy, dtype=np.float32))[None]
        accel = obs.accel
        if self.options.accel_clip is not None:
            lo, hi = self.options.accel_clip
            accel = min(max(accel, lo), hi)
        return self.bundle.model.ego_features(f(obs.speed), f(accel), f(obs.yaw_rate), past)

    def restart_sampling(self) -> None:
        """Sampling seeds restart from options.seed and the previous plan is forgotten, so a run of
        plans (one closed-loop episode) draws the same rollouts whatever ran before it."""
        self._plans = 0
        self._previous = None

    def _nav(self, obs: Observation) -> torch.Tensor:
        return torch.tensor([self.tokenizer.id(f"<nav:{obs.nav_command}>")])

    def prompt_for(self, obs: Observation) -> torch.Tensor:
        """The prompt embeddings of an observation (what `plan` decodes from)."""
        obs.validate()
        return self.backend.prompt(self._images(obs.images), self._ego(obs), self.bos, self._nav(obs))

    # ------------------------------------------------------------------ plan
    def plan(self, obs: Observation, context: SafetyContext | None = None) -> Plan:
        """`context`: obstacles and drivable corridor for safety-guided reflection (ego frame at
        obs.stamp); without one, the safety check covers kinematics and meta consistency only."""
        return self.plan_and_ids(obs, context)[0]

    def plan_and_ids(self, obs: Observation, context: SafetyContext | None = None) -> tuple[Plan, np.ndarray]:
        """The plan and the output token ids it was decoded from ((rollouts, L), in `self.layout`):
        what RL fine-tuning scores and trains on (`training/grpo.py`)."""
        obs.validate()
        t0 = time.perf_counter()
        images = self._images(obs.images)
        ego = self._ego(obs)
        nav = self._nav(obs)
        t1 = time.perf_counter()
        prompt = self.backend.prompt(images, ego, self.bos, nav)
        t2 = time.perf_counter()
        opt = self.options
        reflector = None
        checks_safety = opt.reflect in ("safety", "both")
        if opt.reflect != "off":
            if checks_safety and context is None:
                context = SafetyContext(v0=float(obs.speed))
            reflector = _keep_draft(make_reflector(opt.reflect, self.codec, context, opt.autoedit_tau, opt.safety_rounds,
                                                      opt.manoeuvre_resamples, opt.safety_repair))
        draft, source = None, ""
        if self._uses_prior and self._previous is not None:
            draft, source = prior_ids(self.codec, *self._previous, obs.stamp), "previous"
        if draft is None and self._uses_kinematic:
            draft, source = kinematic_ids(self.codec, obs), "kinematic"
        prior = torch.from_numpy(draft) if draft is not None else None
        ids, stats = decode(self.backend, self.layout, prompt, self.strategy,
                            DecodeOptions(opt.temperature, opt.rollouts, opt.rollout_temperature, opt.seed + self._plans,
                                          self._bias_entries),
                            reflect=reflector, prior=prior)
        t3 = time.perf_counter()
        stats.prior = source if prior is not None else ""
        self._plans += 1
        ids = ids.cpu().numpy()
        plan = self._postprocess(ids, obs, context if checks_safety else None)
        if reflector is not None and reflector.draft is not None:
            drafts = [self.codec.decode(row).waypoints for row in reflector.draft.cpu().numpy()]
            plan.draft_waypoints = np.mean(drafts, axis=0)
        t4 = time.perf_counter()
        stats.stage_ms.update(preprocess=(t1 - t0) * 1e3, encode=(t2 - t1) * 1e3, decode=(t3 - t2) * 1e3,
                              postprocess=(t4 - t3) * 1e3)
        plan.stats = stats
        self._previous = (plan, ids[0])
        return plan, ids

    def _postprocess(self, ids: np.ndarray, obs: Observation, context: SafetyContext | None = None) -> Plan:
        """The published plan from the decoded ids: interpolated, smoothed, re-timed by the meta where asked.
        `context`: safety reflection's, when it ran; a pull-away (start_on_meta) is written after reflection, so it
        is checked here and left out where it meets a road user or leaves the corridor the decoded plan did not."""
        plans = [self.codec.decode(row) for row in ids]
        plan = plans[0]
        plan.stamp = obs.stamp
        v0 = np.array([obs.speed, 0.0])
        a0 = np.array([obs.accel, obs.speed * obs.yaw_rate])
        curves = np.stack([jmt_interpolate(p.waypoints, p.waypoint_times, v0, a0, OUTPUT_TIMES) for p in plans])
        xy = curves.mean(0)
        if self.options.speed_smoothing > 0:
            xy = smooth_speed_profile(xy, OUTPUT_TIMES, obs.speed, obs.accel, self.options.speed_smoothing)
        meta_ok = plan.meta is not None and all(plan.validity.get(f"future_meta_behavior.{k}", True)
                                                for k in ("longitudinal", "target_speed"))  # a garbled meta is not followed
        if meta_ok and follows_meta(self.options.follow_meta_speed, plan.critical_objects):
            xy = follow_meta_speed(xy, OUTPUT_TIMES, obs.speed, plan.meta.longitudinal, plan.meta.target_speed)
        if meta_ok and self.options.start_on_meta:
            before = self._previous[0] if self._previous is not None else None
            under_way = (before is not None and before.pulled_away
                         and 0.0 < obs.stamp - before.stamp <= PULL_AWAY_MAX_GAP_S)
            pulled = start_on_meta(xy, OUTPUT_TIMES, obs.speed, plan.meta.longitudinal, plan.meta.target_speed,
                                   standing=START_RELEASE_MPS if under_way else START_STANDING_MPS)
            if pulled is not xy and context is not None and (
                    safety.road_user_cost(pulled, OUTPUT_TIMES, context)
                    > safety.road_user_cost(xy, OUTPUT_TIMES, context) + 1e-9):
                plan.pull_away_refused, pulled = True, xy
            plan.pulled_away, xy = pulled is not xy, pulled
        yaw, speed = path_yaw_speed(xy, OUTPUT_TIMES, start_yaw=0.0, start_speed=obs.speed)
        plan.trajectory = to_trajectory_array(OUTPUT_TIMES, xy, yaw, speed)
        if len(plans) > 1:
            plan.waypoints = np.mean([p.waypoints for p in plans], axis=0)
            plan.rollouts = [c for c in curves]
            for p in plans[1:]:
                for k, ok in p.validity.items():
                    plan.validity[k] = plan.validity.get(k, True) and ok
        return plan


class _keep_draft:
    """A reflector that remembers the ids it was handed (the draft), for drawing and stats."""

    def __init__(self, reflector):
        self.reflector = reflector
        self.draft = None

    def __call__(self, backend, layout, out, start, strategy, stats):
        self.draft = out.clone()
        return self.reflector(backend, layout, out, start, strategy, stats)
