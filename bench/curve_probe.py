"""Does the trajectory bend at a curve's start, and does it take the bend from the cameras or from the text?

On the follow-lane curve episodes of a validation seed (31 by default; never the reporting seed 777), every
0.5 s where the expert's 5 s future departs from constant velocity by more than 1 m (a curve start), plan
greedily and report how many plans bend (|y@end| >= 0.05 m) and to the expert's side. For schemas with an
explanation, the same with the expert's explanation pinned (`decode_block(..., pinned=)`): if the bend
follows the pinned sentence and not the scene, the trajectory reads the text, not the image
(docs/training.md, "why y = 0 at curves").

    .venv/bin/python bench/curve_probe.py --checkpoints fast_ddrive_tiny,trajectory_only_tiny --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.decoding.block_loop import decode_block  # noqa: E402
from ddrive_ros.decoding.layout_tensors import layout_tensors  # noqa: E402
from ddrive_ros.evaluation.metrics import constant_velocity_prediction  # noqa: E402
from ddrive_ros.plan import DecodeStats  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402
from ddrive_ros.sample import future_in_range  # noqa: E402
from ddrive_ros.sim.sample import default_renderer, ego_track, episode_seeds, make_sample, valid_anchor_frames  # noqa: E402
from ddrive_ros.sim.scenario import sample_scenario  # noqa: E402
from ddrive_ros.sim.world import Episode  # noqa: E402
from ddrive_ros.training.dataset import target_plan  # noqa: E402

DURATION_S = 12.0


def curve_starts(seed: int, episodes: int, stride_s: float = 0.5) -> list:
    out = []
    renderer = default_renderer()
    for s in tqdm(episode_seeds(seed, episodes), desc="curve episodes", unit="ep"):
        scenario = sample_scenario(s, DURATION_S)
        if scenario.kind != "curve" or scenario.nav_command != "FOLLOW_LANE":
            continue
        ep = Episode(s, DURATION_S)
        track = ego_track(ep)
        for frame in valid_anchor_frames(ep, stride_s):
            sample = make_sample(ep, frame, renderer, track=track)
            if not future_in_range(sample.future_xy):
                continue
            obs = sample.observation
            cv = constant_velocity_prediction(obs.speed, obs.yaw_rate, sample.future_times)
            if abs(sample.future_xy[-1, 1] - cv[-1, 1]) > 1.0:
                out.append(sample)
        ep.clear_cache()
    return out


@torch.inference_mode()
def pinned_plan(planner: Planner, sample, section: str) -> np.ndarray:
    """Greedy waypoints with `section` pinned to the expert's tokens (the rest decoded as usual)."""
    layout, backend, codec = planner.layout, planner.backend, planner.codec
    expert = torch.as_tensor(codec.encode(target_plan(sample, codec)).ids)[None]
    pin = torch.as_tensor(layout.editable & (layout.section == layout.schema.section_names.index(section)))[None]
    carry = backend.prefill(planner.prompt_for(sample.observation))
    masks = layout_tensors(layout, backend.window, backend.vocab_size, carry.device)
    out = torch.where(pin, expert, masks.template[None].clone())
    gen = torch.Generator().manual_seed(0)
    stats = DecodeStats(decoder="pinned")
    for block in layout.blocks:
        carry = decode_block(backend, layout, masks, out, block, carry, planner.strategy, 0.0, gen, stats, pinned=pin)
    return codec.decode(out[0].numpy()).waypoints


def label_stats(sources: list[tuple[int, int]]) -> dict:
    """How well the explanation's route sentence predicts the trajectory's lateral offset in the labels
    (lateral STRAIGHT samples of these (world seed, episodes) sources, labelled as the sample maker
    labels them, without rendering): the shortcut a full model can learn instead of the cameras."""
    from ddrive_ros.sim.labels import critical_objects, explanation, meta_behavior
    from ddrive_ros.timeline import OUTPUT_TIMES
    from ddrive_ros.trajectory import world_to_ego

    rows = []
    for seed, n in sources:
        for s in tqdm(episode_seeds(seed, n), desc=f"labels, world seed {seed}", unit="ep"):
            ep = Episode(s, DURATION_S)
            for frame in valid_anchor_frames(ep, 0.5):
                k = ep.frames[frame].step
                future = world_to_ego(ep.ego_xy[k + np.round(OUTPUT_TIMES / ep.dt).astype(int)], ep.ego_xy[k],
                                      float(ep.ego_yaw[k]))
                if not future_in_range(future):
                    continue
                meta = meta_behavior(ep, k)
                if meta.lateral != "STRAIGHT":
                    continue
                text = explanation(ep, k, meta, critical_objects(ep, k))
                said = 1.0 if "curve of the road to the left" in text else -1.0 if "curve of the road to the right" in text else 0.0
                rows.append(("keeping its lane" in text, "following the curve" in text,
                             bool(np.all(np.abs(future[:, 1]) < 0.05)), abs(float(future[-1, 1])) > 1.0,
                             said, float(np.sign(future[-1, 1]))))
            ep.clear_cache()
    keep, follow, zero, bent, said, sign = (np.array(c) for c in zip(*rows))
    sided = follow & (said != 0) & bent
    return {"sources": [list(x) for x in sources], "straight_samples": len(rows),
            "keeping_its_lane": {"n": int(keep.sum()), "share_with_every_y_zero": round(float(zero[keep].mean()), 3),
                                 "share_with_abs_y_end_over_1m": round(float(bent[keep].mean()), 3)},
            "following_the_curve": {"n": int(follow.sum()), "share_with_abs_y_end_over_1m": round(float(bent[follow].mean()), 3),
                                    # where the sentence names a side (route sentences labelled from the road ahead)
                                    "bent_ones_to_the_side_it_names": round(float((said[sided] == sign[sided]).mean()), 3)
                                    if sided.any() else None}}


def bends(ys: np.ndarray, labels: np.ndarray) -> dict:
    bent = np.abs(ys) >= 0.05
    return {"bent": int(bent.sum()), "bent_to_the_expert_side": int((np.sign(ys[bent]) == np.sign(labels[bent])).sum()),
            "mean_abs_y_error_m": round(float(np.mean(np.abs(ys - labels))), 2),
            "mean_abs_y_m": round(float(np.mean(np.abs(ys))), 2), "mean_abs_expert_y_m": round(float(np.mean(np.abs(labels))), 2),
            # how far the plan's end offset follows the expert's (0: unrelated or constant, 1: proportional)
            "corr_with_expert_y": round(float(np.corrcoef(ys, labels)[0, 1]), 3) if np.std(ys) > 0 else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoints", default="fast_ddrive_tiny,trajectory_only_tiny")
    ap.add_argument("--seed", type=int, default=31, help="validation episode seed (not the reporting seed)")
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--label-stats", default="1:150,4:200",
                    help="world seed:episodes of training data whose labels to check for the text shortcut "
                         "(default: the shipped fast_ddrive_tiny's balanced stage); empty: skip")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    samples = curve_starts(args.seed, args.episodes)
    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "seed": args.seed, "curve_start_samples": len(samples), "rows": []}
    for name in args.checkpoints.split(","):
        planner = Planner(ckpt.load(name), PlannerOptions(decoder="speculative", draft_previous=False))
        plans = [planner.plan(s.observation) for s in tqdm(samples, desc=name, leave=False)]
        ys = np.array([p.waypoints[-1, 1] for p in plans])
        t_end = float(plans[0].waypoint_times[-1])
        labels = np.array([np.interp(t_end, s.future_times, s.future_xy[:, 1]) for s in samples])
        row = {"checkpoint": name, "horizon_s": t_end, **bends(ys, labels)}
        names = planner.layout.schema.section_names
        if "explanation" in names:
            said = np.array(["curve" in (p.explanation or "") for p in plans])
            told = np.array(["curve" in (s.labels.explanation or "") for s in samples])
            row["own_explanation_mentions_the_curve"] = int(said.sum())
            row["expert_explanation_mentions_the_curve"] = int(told.sum())
            sides = ["left" if y > 0 else "right" for y in labels]
            row["own_explanation_names_the_expert_side"] = int(sum(f"curve of the road to the {side}" in (p.explanation or "")
                                                                for p, side in zip(plans, sides)))
            pinned = np.array([pinned_plan(planner, s, "explanation")[-1, 1] for s in tqdm(samples, desc="pinned", leave=False)])
            row["expert_explanation_pinned"] = bends(pinned, labels)
            row["expert_explanation_pinned"]["bent_where_it_says_curve"] = int((np.abs(pinned[told]) >= 0.05).sum())
            row["expert_explanation_pinned"]["bent_where_it_says_keeping"] = int((np.abs(pinned[~told]) >= 0.05).sum())
        result["rows"].append(row)
        print(json.dumps(row))
    if args.label_stats:
        sources = [tuple(int(v) for v in part.split(":")) for part in args.label_stats.split(",")]
        result["training_labels"] = label_stats(sources)
        print(json.dumps(result["training_labels"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
