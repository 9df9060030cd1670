"""How often the full model names the lead vehicle, by how far ahead it is: is a missed lead a far one (pixels) or
a near one (outside training)?

    .venv/bin/python bench/lead_recall.py --checkpoint fast_ddrive_tiny --seed 31 --episodes 200 \
        --json bench/results/lead_recall_val31.json --png docs/lead_recall.png

For every anchor (one per second) of `--episodes` world episodes of a validation seed, the planner plans from the
observation as `ddrive eval` does (speculative, greedy) and its `critical_objects.lead_vehicle` is compared with the
label (`sim/labels.py`: a vehicle in the ego's path whose rear is 0-40 m ahead of the ego's front bumper). Recall is
reported by that gap, and by the lead's speed (standing or moving), beside the share of anchors with no lead that the
model calls a lead (false alarms). Refuses the held-out seed 777: this measures where to look next, it is not a
result to report.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GAP_BINS_M = (-1.0, 5.0, 10.0, 20.0, 30.0, 40.0)  # the label's range is (-1, 40]
STANDING_MPS = 0.5


def bin_label(gap: float) -> str:
    for lo, hi in zip(GAP_BINS_M[:-1], GAP_BINS_M[1:]):
        if lo < gap <= hi:
            return f"{max(lo, 0.0):g}-{hi:g} m"
    raise ValueError(f"lead gap {gap} m outside the label's range {GAP_BINS_M[0]}..{GAP_BINS_M[-1]}")


def _named(rows: list[dict], share: str = "recall") -> dict:
    """How many rows, how many of them name a lead, and that share (None for no rows)."""
    named = sum(r["named"] for r in rows)
    return {"n": len(rows), "named": named, share: named / len(rows) if rows else None}


def summarise(rows: list[dict]) -> dict:
    """Recall of `named` among rows with a lead, by gap bin and by standing / moving; false alarms among the rest."""
    leads = [r for r in rows if r["lead"]]
    return {"anchors": len(rows), "with_lead": len(leads),
            "by_gap": {name: _named([r for r in leads if r["gap_bin"] == name])
                       for name in (bin_label(hi) for hi in GAP_BINS_M[1:])},
            "by_motion": {"standing": _named([r for r in leads if r["lead_v"] < STANDING_MPS]),
                          "moving": _named([r for r in leads if r["lead_v"] >= STANDING_MPS])},
            "recall": _named(leads)["recall"],
            "false_alarms": _named([r for r in rows if not r["lead"]], "rate")}


def _share(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def plot(summary: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["by_gap"])
    rec = [summary["by_gap"][n]["recall"] or 0.0 for n in names]
    counts = [summary["by_gap"][n]["n"] for n in names]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    bars = ax.bar(names, rec, color="#c0392b")
    for b, n in zip(bars, counts):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.02, f"n={n}", ha="center", fontsize=8)
    fa = summary["false_alarms"]["rate"]
    if fa is not None:
        ax.axhline(fa, color="0.4", ls="--", lw=1)
        ax.text(len(names) - 0.5, fa + 0.02, f"false alarms, no lead: {fa:.2f}", ha="right", fontsize=8, color="0.3")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("lead vehicle named (recall)")
    ax.set_xlabel("gap from the ego's front bumper to the lead's rear")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--seed", type=int, required=True, help="a validation episode seed (777 is refused)")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args(argv)
    if args.seed == 777:
        raise ValueError("seed 777 is the held-out seed: measure on a validation seed")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")

    import torch
    from tqdm import tqdm

    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.sample import future_in_range
    from ddrive_ros.sim.labels import lead_vehicle
    from ddrive_ros.sim.sample import default_renderer, ego_track, episode_seeds, make_sample, valid_anchor_frames
    from ddrive_ros.sim.world import Episode

    torch.set_num_threads(1)
    planner = Planner(ckpt.load(args.checkpoint), PlannerOptions(decoder="speculative", draft_previous=False))
    schema = planner.schema
    if ("critical_objects" not in schema.section_names
            or "lead_vehicle" not in [f.name for f in schema.section("critical_objects").fields]):
        raise ValueError(f"{args.checkpoint}: its schema {planner.schema.name} names no lead_vehicle")
    renderer = default_renderer()
    rows = []
    for ep_seed in tqdm(episode_seeds(args.seed, args.episodes), desc="episodes", unit="ep"):
        ep = Episode(ep_seed, args.duration)
        track = ego_track(ep)
        for index in valid_anchor_frames(ep, 1.0):
            sample = make_sample(ep, index, renderer, track=track)
            if not future_in_range(sample.future_xy):
                continue
            k = ep.frames[index].step
            agent, gap = lead_vehicle(ep, k)
            if (agent >= 0) != bool(sample.labels.critical_objects["lead_vehicle"]):
                raise RuntimeError(f"episode {ep_seed} t0 {sample.t0}: labels.lead_vehicle disagrees with the label")
            planner.restart_sampling()
            plan = planner.plan(sample.observation)
            rows.append({"episode_seed": ep_seed, "t0": sample.t0, "lead": agent >= 0,
                         "gap_m": None if agent < 0 else round(gap, 2),
                         "gap_bin": None if agent < 0 else bin_label(gap),
                         "lead_v": None if agent < 0 else round(float(ep.agent_v[agent, k]), 2),
                         "ego_v": round(float(ep.ego_v[k]), 2),
                         "named": bool(plan.critical_objects.get("lead_vehicle", False))})
        ep.clear_cache()
    summary = summarise(rows)
    print(f"\nlead vehicle named by gap ({args.checkpoint}, seed {args.seed}, {len(rows)} anchors, "
          f"{summary['with_lead']} with a lead)\n")
    print("| gap | anchors with a lead | named | recall |\n|---|---|---|---|")
    for name, g in summary["by_gap"].items():
        print(f"| {name} | {g['n']} | {g['named']} | {_share(g['recall'])} |")
    for name, g in summary["by_motion"].items():
        print(f"| {name} lead | {g['n']} | {g['named']} | {_share(g['recall'])} |")
    fa = summary["false_alarms"]
    print(f"| no lead (false alarms) | {fa['n']} | {fa['named']} | {_share(fa['rate'])} |")
    if args.png:
        plot(summary, args.png, f"{args.checkpoint}: lead vehicle named, validation seed {args.seed}, {len(rows)} anchors")
        print(f"wrote {args.png}")
    if args.json:
        Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "seed": args.seed,
                                               "episodes": args.episodes, "summary": summary, "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
