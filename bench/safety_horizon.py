"""How far ahead the safety check should judge road users: saved closed-loop runs of the node's setting at several
`road_user_horizon_s`, each paired episode by episode against the run that judged every waypoint of the 5 s plan.

    .venv/bin/python bench/safety_horizon.py --png docs/safety_horizon.png --json bench/results/safety_horizon.json

The runs are `ddrive sim --checkpoint fast_ddrive_tiny --episodes 60 --seed S --methods speculative --reflect safety
--safety-perception tracked --safety-repair brake --latency-ms 200 --num-threads 1 --safety-limits
road_user_horizon_s=H --json bench/results/sim_60_valS_fast_ddrive_brake_objects_bins_safety_tracked_brake_horizonHH
.json` on the six validation seeds (S = 31, ..., 531; HH = 10 x H); the whole-plan runs are round 19's
`..._safety_tracked_brake_ctrv.json`, made before the horizon existed. It reads them and runs nothing. The table
gives each horizon's pooled means, its paired PDMS and progress differences with their standard errors, and the
counts that a shorter look ahead could make worse: episodes with an at-fault collision, off the road, failing
comfort. The picture plots PDMS and progress against the horizon with those standard errors.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddrive_ros.sim.compare import compare, load_runs  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (31, 131, 231, 331, 431, 531)
METHOD = "speculative+safety"
WHOLE = "sim_60_val{s}_fast_ddrive_brake_objects_bins_safety_tracked_brake_ctrv.json"
HORIZON = "sim_60_val{s}_fast_ddrive_brake_objects_bins_safety_tracked_brake_horizon{tag}.json"


def runs(pattern: str, **kw) -> list[Path]:
    paths = [RESULTS / pattern.format(s=s, **kw) for s in SEEDS]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"missing saved runs: {', '.join(missing)} (the module docstring has the command)")
    return paths


def counts(episodes: dict[int, dict]) -> dict[str, int]:
    e = list(episodes.values())
    return {"at_fault": sum(x["at_fault_collisions"] > 0 for x in e), "off_road": sum(x["dac"] < 1 for x in e),
            "comfort_fails": sum(x["comfort"] < 1 for x in e)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizons", default="3.0,2.0,1.5", help="the horizons (s) with saved runs, comma-separated")
    ap.add_argument("--png", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    horizons = [float(h) for h in args.horizons.split(",")]
    whole = load_runs(runs(WHOLE), METHOD)
    rows = [{"horizon_s": 5.0, "label": "whole plan (5 s)", "pdms": None, "ep": None, **counts(whole),
             "pdms_mean": sum(e["pdms"] for e in whole.values()) / len(whole),
             "ep_mean": sum(e["ep"] for e in whole.values()) / len(whole)}]
    for h in horizons:
        new = load_runs(runs(HORIZON, tag=f"{round(h * 10):02d}"), METHOD)
        cmp = compare(whole, new)
        m = cmp["metrics"]
        rows.append({"horizon_s": h, "label": f"{h:g} s", "pdms": m["pdms"], "ep": m["ep"], **counts(new),
                     "pdms_mean": m["pdms"]["new"], "ep_mean": m["ep"]["new"], "paired": cmp["paired_episodes"]})
    head = "| road users judged up to | PDMS | paired (SE) | EP | paired (SE) | at-fault | off the road | comfort fails |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        diff = (lambda k: f"{r[k]['diff']:+.4f} ({r[k]['se']:.4f})" if r[k] else "")
        lines.append(f"| {r['label']} | {r['pdms_mean']:.4f} | {diff('pdms')} | {r['ep_mean']:.4f} | {diff('ep')} | "
                     f"{r['at_fault']} | {r['off_road']} | {r['comfort_fails']} |")
    print(f"{len(whole)} validation episodes, the node's setting, each horizon paired against the whole plan")
    print("\n".join(lines))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"seeds": SEEDS, "episodes": len(whole), "rows": rows}, indent=1))
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rs = sorted(rows, key=lambda r: r["horizon_s"])
        x = [r["horizon_s"] for r in rs]
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for key, colour, name in (("pdms", "tab:blue", "PDMS"), ("ep", "tab:orange", "progress (EP)")):
            y = [r[f"{key}_mean"] for r in rs]
            se = [r[key]["se"] if r[key] else 0.0 for r in rs]
            ax.errorbar(x, y, yerr=se, marker="o", color=colour, capsize=3, label=f"{name} (bars: paired SE)")
        for i, r in enumerate(rs):  # the counts along the bottom, under their horizon, staggered
            ax.text(r["horizon_s"], 0.03 + 0.1 * (i % 2), f"comfort fails {r['comfort_fails']}\nat-fault {r['at_fault']}",
                    ha="center", fontsize=7, transform=ax.get_xaxis_transform())
        ax.set_xlim(min(x) - 0.4, max(x) + 0.4)
        ax.set_xlabel("road users judged up to (s into the 5 s plan)")
        ax.set_ylabel(f"mean over {len(whole)} validation episodes")
        ax.set_title("Safety check horizon, node's setting (tracked boxes, brake repair)")
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
