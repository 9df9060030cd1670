"""What moving the causal stream's bin tokens during training (training/prefix_noise.py) buys and costs, as a
function of how far they move (issue 12, round 18): forwards per cold plan and ADE@4s open loop, greedy and N=4
closed-loop PDMS, each against the shipped model and a control fine-tune with nothing moved, read from the saved
`ddrive eval --json` and `ddrive sim --json` runs of validation seed 31 (docs/training.md, "Round 18").

    .venv/bin/python bench/prefix_noise_curve.py --json bench/results/prefix_noise_curve_val31.json \
        --plot docs/prefix_noise_curve.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"

# (label, B: how far a moved token moves, eval JSON, sim JSON); B 0 = the control, nothing moved
RUNS = [
    ("shipped (round 6)", None, "eval_trajectory_only_tiny_val31_200_r18_shipped.json",
     "sim_60_val31_trajectory_only_r18_shipped.json"),
    ("control, nothing moved", 0, "eval_trajectory_only_tiny_val31_200_prefix_control_not_shipped.json",
     "sim_60_val31_trajectory_only_prefix_control_not_shipped.json"),
    ("p 0.5, B 3", 3, "eval_trajectory_only_tiny_val31_200_prefix_b3_not_shipped.json",
     "sim_60_val31_trajectory_only_prefix_b3_not_shipped.json"),
    ("p 0.5, B 8", 8, "eval_trajectory_only_tiny_val31_200_prefix_b8_not_shipped.json",
     "sim_60_val31_trajectory_only_prefix_b8_not_shipped.json"),
    ("p 0.5, B 16", 16, "eval_trajectory_only_tiny_val31_200_prefix_b16_not_shipped.json",
     "sim_60_val31_trajectory_only_prefix_b16_not_shipped.json"),
    ("p 0.5, B 32", 32, "eval_trajectory_only_tiny_val31_200_prefix_b32_not_shipped.json",
     "sim_60_val31_trajectory_only_prefix_b32_not_shipped.json"),
]


def method_row(path: Path, method: str) -> dict:
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"{path}: not a saved ddrive eval/sim --json run ({e})") from e
    for row in rows:
        if row.get("method") == method:
            return row
    raise SystemExit(f"{path}: no row {method!r}; it has {[r.get('method') for r in rows]}")


def collect(results: Path) -> list[dict]:
    out = []
    for label, bins, eval_name, sim_name in RUNS:
        ar = method_row(results / eval_name, "ar")
        greedy = method_row(results / eval_name, "speculative")
        n4 = method_row(results / eval_name, "speculative N=4")
        if greedy["ade"] != ar["ade"]:
            raise SystemExit(f"{eval_name}: speculative ADE {greedy['ade']} differs from AR's {ar['ade']}")
        sim_greedy = method_row(results / sim_name, "speculative")
        sim_n4 = method_row(results / sim_name, "speculative N=4")
        out.append({"run": label, "bins": bins, "ade": greedy["ade"], "ade_n4": n4["ade"],
                    "forwards": greedy["forwards_per_plan"], "x_fewer": ar["forwards_per_plan"] / greedy["forwards_per_plan"],
                    "comfort_open_loop": greedy["comfort"], "pdms_closed": sim_greedy["pdms"], "pdms_closed_n4": sim_n4["pdms"]})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| run | ADE@4s | ADE@4s N=4 | fwd/plan | x fewer than AR | open-loop comfort | closed-loop PDMS | N=4 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['ade']:.3f} | {r['ade_n4']:.3f} | {r['forwards']:.2f} | {r['x_fewer']:.2f} | "
                     f"{r['comfort_open_loop']:.3f} | {r['pdms_closed']:.3f} | {r['pdms_closed_n4']:.3f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shipped = rows[0]
    swept = [r for r in rows if r["bins"] is not None]
    xs = [r["bins"] for r in swept]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("x fewer forwards than AR (cold plan)", "x_fewer", None, 3.0),
              ("ADE@4s open loop (m)", "ade", "ade_n4", None),
              ("closed-loop PDMS (60 episodes)", "pdms_closed", "pdms_closed_n4", None)]
    for ax, (title, key, key_n4, bar) in zip(axes, panels):
        ax.plot(xs, [r[key] for r in swept], "o-", color="tab:blue", label="greedy")
        ax.axhline(shipped[key], color="tab:blue", ls="--", lw=1, label="shipped, greedy")
        if key_n4:
            ax.plot(xs, [r[key_n4] for r in swept], "s-", color="tab:orange", label="N=4")
            ax.axhline(shipped[key_n4], color="tab:orange", ls="--", lw=1, label="shipped, N=4")
        if bar:
            ax.axhline(bar, color="k", ls=":", lw=1, label="issue 12 bar")
        ax.set_xscale("symlog", linthresh=2)
        ax.set_xticks(xs)
        ax.set_xticklabels(["none" if x == 0 else str(x) for x in xs])
        ax.set_xlabel("bins a moved token moves (B; p 0.5)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("trajectory_only_tiny, 600 fine-tune steps with prefix noise (validation seed 31)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder with the saved runs")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--plot", type=Path, help="write the three panels here (PNG)")
    args = ap.parse_args(argv)
    rows = collect(args.results)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
