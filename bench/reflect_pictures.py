"""One plan before and after each kind of reflection, from above (docs/reflection_*.png).

    .venv/bin/python bench/reflect_pictures.py [--checkpoint trajectory_only_tiny] [--out docs]

Held-out samples (seed 777): for AutoEdit, the sample where the model rewrote the most trajectory
tokens of its own draft; for safety-guided reflection, the first sample whose draft fails the check
under perfect perception (the sample's true road users) and which reflection changes. Orange: the
draft; red: the reflected plan; green: the expert; grey: road users at t0.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ddrive_ros.evaluation import draw
from ddrive_ros.evaluation.evaluate import held_out_samples, sample_safety_context, sample_scene
from ddrive_ros.planner import Planner, PlannerOptions
from ddrive_ros import checkpoint as ckpt


def _kinds(plan) -> str:
    after = plan.stats.reflect.get("violations_after")
    before = plan.stats.reflect.get("violations_before")
    if before is None:
        return f"{plan.stats.reflect.get('edited_tokens', 0)} tokens rewritten"
    return f"violations {','.join(before[0]) or 'none'} -> {','.join(after[0]) or 'none'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="trajectory_only_tiny")
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    bundle = ckpt.load(args.checkpoint)
    samples = held_out_samples(777, args.episodes)
    out = Path(args.out)
    written, summary = [], {}
    for mode in ("autoedit", "safety"):
        planner = Planner(bundle, PlannerOptions(decoder="speculative", reflect=mode))
        best = None
        for s in tqdm(samples, desc=mode):
            ctx = sample_safety_context(s) if mode == "safety" else None
            plan = planner.plan(s.observation, ctx)
            moved = float(np.abs(plan.waypoints - plan.draft_waypoints).max())
            if mode == "autoedit":
                score = plan.stats.reflect.get("edited_tokens", 0)
            else:
                score = float(bool(plan.stats.reflect["violations_before"][0]) and moved > 0)
            if best is None or score > best[0]:
                best = (score, s, plan)
            if mode == "safety" and score > 0:
                break
        score, s, plan = best
        scene = sample_scene(s, plan, f"speculative+{mode}")
        scene.draft = plan.draft_waypoints
        scene.lines.append(_kinds(plan))
        written.append(draw.write_png(out / f"reflection_{mode}.png", draw.bev(scene, size=420)))
        summary[mode] = {"episode_seed": s.episode_seed, "t0": s.t0, "reflect": plan.stats.reflect,
                         "draft": np.asarray(plan.draft_waypoints).round(2).tolist(),
                         "plan": np.asarray(plan.waypoints).round(2).tolist()}
    (out / "reflection_pictures.json").write_text(json.dumps(summary, indent=1, default=str))
    print("wrote " + ", ".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
