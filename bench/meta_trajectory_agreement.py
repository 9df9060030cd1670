"""Does the full plan's trajectory make the manoeuvre its own meta behaviour names? Open loop, held-out samples.

For every sample of a validation seed (31 by default; never the reporting seed 777) this plans once (greedy, the
planner's defaults) and sorts the plans by the expert's lateral label (sim/labels.py). Per label it reports:
- `meta right`: plans whose lateral meta equals the label (the meta's recall);
- `trajectory makes it`: plans whose own trajectory makes the manoeuvre by the label's rule in the ego frame, at
  the plan's 5 s point: a lane change ends at least 1 m (half the label's 2 m) to its side, a turn ends heading at
  least 15 deg (half the label's 30 deg) to its side; STRAIGHT ends within 1 m and 15 deg of straight on;
- `expert makes it`: the same rule on the expert's own future (how far the ego-frame rule agrees with the label);
- `both`: meta right and trajectory makes it.
A meta that is right while the trajectory goes straight on is a plan that names a manoeuvre it does not drive.

    .venv/bin/python bench/meta_trajectory_agreement.py --checkpoint fast_ddrive_tiny --seed 31 --episodes 200 \\
        --json bench/results/meta_trajectory_agreement_val31.json
    .venv/bin/python bench/meta_trajectory_agreement.py --replot bench/results/meta_trajectory_agreement_val31.json \\
        bench/results/meta_trajectory_agreement_round4_val31.json --plot docs/meta_trajectory_agreement.png
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
from ddrive_ros.evaluation.evaluate import held_out_samples  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402

CLASSES = ("STRAIGHT", "LEFT_TURN", "RIGHT_TURN", "LEFT_CHANGE", "RIGHT_CHANGE")
CHANGE_M = 1.0  # half the label's 2 m
TURN_DEG = 15.0  # half the label's 30 deg


def makes(label: str, y_end: float, yaw_end_deg: float) -> bool:
    """Whether a path ending at lateral offset y_end (m, left +) and heading yaw_end_deg makes `label`."""
    if label == "STRAIGHT":
        return abs(y_end) < CHANGE_M and abs(yaw_end_deg) < TURN_DEG
    sign = 1.0 if label.startswith("LEFT") else -1.0
    return sign * (y_end if label.endswith("CHANGE") else yaw_end_deg) >= (CHANGE_M if label.endswith("CHANGE") else TURN_DEG)


def measure(checkpoint: str, seed: int, episodes: int) -> list[dict]:
    planner = Planner(ckpt.load(checkpoint), PlannerOptions())
    if planner.schema.section_names[-1] != "trajectory" or "future_meta_behavior" not in planner.schema.section_names:
        raise SystemExit(f"{checkpoint}: schema {planner.schema.name} has no meta behaviour to compare with")
    out = []
    for s in tqdm(held_out_samples(seed, episodes, 1), desc="plans"):
        planner.restart_sampling()  # each sample cold, as in ddrive eval
        plan = planner.plan(s.observation)
        y, yaw = float(plan.trajectory[-1, 2]), float(np.degrees(plan.trajectory[-1, 3]))
        ey, eyaw = float(s.future_xy[-1, 1]), float(np.degrees(s.future_yaw[-1]))
        out.append({"label": s.labels.meta.lateral, "meta": plan.meta.lateral if plan.meta else None,
                    "nav": s.observation.nav_command, "plan_y_end": y, "plan_yaw_end_deg": yaw,
                    "expert_y_end": ey, "expert_yaw_end_deg": eyaw})
    return out


def table(samples: list[dict]) -> list[dict]:
    rows = []
    for c in CLASSES:
        mine = [r for r in samples if r["label"] == c]
        if not mine:
            continue
        traj = [makes(c, r["plan_y_end"], r["plan_yaw_end_deg"]) for r in mine]
        meta = [r["meta"] == c for r in mine]
        rows.append({"label": c, "samples": len(mine), "meta_right": sum(meta), "trajectory_makes_it": sum(traj),
                     "expert_makes_it": sum(makes(c, r["expert_y_end"], r["expert_yaw_end_deg"]) for r in mine),
                     "both": sum(m and t for m, t in zip(meta, traj))})
    return rows


def plot(runs: list[dict], path: str) -> None:
    """Per label, bars of meta right / trajectory makes it / expert makes it, one group of bars per saved run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [c for c in CLASSES if c != "STRAIGHT"]
    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs):
        rows = {r["label"]: r for r in run["rows"]}
        x = np.arange(len(labels))
        for i, (key, colour) in enumerate((("meta_right", "tab:blue"), ("trajectory_makes_it", "tab:red"),
                                           ("expert_makes_it", "tab:grey"))):
            share = [rows[c][key] / rows[c]["samples"] if c in rows else 0.0 for c in labels]
            ax.bar(x + (i - 1) * 0.27, share, 0.27, color=colour, label=key.replace("_", " "))
        ax.set_xticks(x, [f"{c}\n({rows[c]['samples'] if c in rows else 0})" for c in labels], fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of the label's samples")
        ax.set_title(f"{Path(str(run['checkpoint'])).name}, seed {run['seed']}", fontsize=10)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("the meta names the manoeuvre; does the trajectory make it? (open loop, 5 s)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="fast_ddrive_tiny")
    ap.add_argument("--seed", type=int, default=31, help="episode seed (a validation seed: not 777)")
    ap.add_argument("--episodes", type=int, default=200, help="one sample per episode, as ddrive eval")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw the table (with --replot: the saved runs)")
    ap.add_argument("--replot", nargs="+", default=None, metavar="JSON", help="measure nothing: draw --plot from saved runs")
    args = ap.parse_args(argv)
    if args.replot:
        if not args.plot:
            raise SystemExit("--replot needs --plot PNG")
        plot([json.loads(Path(f).read_text()) for f in args.replot], args.plot)
        return 0
    torch.set_num_threads(args.threads)
    samples = measure(args.checkpoint, args.seed, args.episodes)
    rows = table(samples)
    cols = ["label", "samples", "meta_right", "trajectory_makes_it", "expert_makes_it", "both"]
    print(f"{args.checkpoint}, seed {args.seed}, {len(samples)} samples (plan and expert at 5 s, ego frame)")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    doc = {"checkpoint": args.checkpoint, "seed": args.seed, "rows": rows, "samples": samples}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        plot([doc], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
