#!/usr/bin/env python3
"""What AutoEdit repairs: perturbed expert trajectories on held-out samples, before and after one
reflect pass of each checkpoint.

For every sample the expert trajectory is perturbed by the repair distribution of
`training/perturb.py` (always perturbed here, never the identity), handed to the model as its
drafted trajectory, and reflected on with AutoEdit (tau 0.5). Reported per checkpoint: the mean
waypoint error against the expert before and after (metres), the trajectory tokens off the expert
before and after, and how many tokens AutoEdit rewrites when handed the unperturbed expert
(edits a perfect draft does not need). Every checkpoint sees the same perturbations.

    python bench/repair_quality.py --checkpoints fast_ddrive_tiny,trajectory_only_tiny --samples 20 \
        --json bench/results/repair_quality.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.decoding.reflect import AutoEdit, edit_given_trajectory  # noqa: E402
from ddrive_ros.evaluation.evaluate import held_out_samples  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402
from ddrive_ros.training.dataset import target_plan  # noqa: E402
from ddrive_ros.training.perturb import RepairSpec, perturbed_ids  # noqa: E402


def measure(checkpoint: str, samples: list, seed: int, tau: float) -> dict:
    planner = Planner(ckpt.load(checkpoint), PlannerOptions(decoder="speculative"))
    codec = planner.codec
    rng = np.random.default_rng(seed)
    spec = RepairSpec(p_progress=0.4, p_heading=0.4, p_both=0.2)  # always perturbed
    err_before, err_after, tok_before, tok_after, edits_on_expert = [], [], [], [], []
    for s in tqdm(samples, desc=checkpoint, unit="sample"):
        expert = torch.from_numpy(codec.encode(target_plan(s, codec)).ids)[None]
        truth = codec.decode(expert[0].numpy()).waypoints
        prompt = planner.prompt_for(s.observation)
        bad = perturbed_ids(expert, codec, spec, rng)
        edited = edit_given_trajectory(planner.backend, planner.layout, prompt, bad, AutoEdit(tau=tau))
        kept = edit_given_trajectory(planner.backend, planner.layout, prompt, expert, AutoEdit(tau=tau))
        err_before.append(float(np.linalg.norm(codec.decode(bad[0].numpy()).waypoints - truth, axis=1).mean()))
        err_after.append(float(np.linalg.norm(codec.decode(edited[0].numpy()).waypoints - truth, axis=1).mean()))
        tok_before.append(int((bad != expert).sum()))
        tok_after.append(int((edited != expert).sum()))
        edits_on_expert.append(int((kept != expert).sum()))
    return {"checkpoint": checkpoint, "samples": len(samples), "tau": tau,
            "waypoint_error_before_m": round(float(np.mean(err_before)), 3),
            "waypoint_error_after_m": round(float(np.mean(err_after)), 3),
            "tokens_off_before": int(np.sum(tok_before)), "tokens_off_after": int(np.sum(tok_after)),
            "edits_on_unperturbed_expert": int(np.sum(edits_on_expert))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoints", default="fast_ddrive_tiny,trajectory_only_tiny")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--episode-seed", type=int, default=777, help="held-out episodes the samples come from")
    ap.add_argument("--seed", type=int, default=5, help="perturbation seed (the same for every checkpoint)")
    ap.add_argument("--tau", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    samples = held_out_samples(args.episode_seed, args.samples)
    rows = [measure(c, samples, args.seed, args.tau) for c in args.checkpoints.split(",") if c]
    print("| checkpoint | samples | waypoint error before | after AutoEdit | tokens off before -> after | "
          "edits on the unperturbed expert |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['checkpoint']} | {r['samples']} | {r['waypoint_error_before_m']:.2f} m | "
              f"{r['waypoint_error_after_m']:.2f} m | {r['tokens_off_before']} -> {r['tokens_off_after']} | "
              f"{r['edits_on_unperturbed_expert']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "command": " ".join(sys.argv)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
