"""What safety reflection buys by what its check sees, from saved `ddrive sim --json` runs (no model runs).

    .venv/bin/python bench/safety_perception.py --seeds 31,131,231,331,431,531 \
        --json bench/results/safety_perception_val6.json --png docs/safety_perception.png

Each row pools the runs of one setting over the validation seeds: reflect off (the `speculative` row of
`sim_60_val{S}_fast_ddrive_brake_objects_bins.json`), the check with static boxes, with the same boxes tracked for
their velocities (what the node does with ~/input/obstacles, track_obstacles), with road users and their true
velocities, the same with the brake repair (round 17), the same with followers left out and road users predicted
along their bends (round 19, the node's defaults; `..._safety_tracked_brake_ctrv.json`), with road users and the route
corridor (the `speculative+safety` rows of `..._safety_boxes_m0.json`, `..._safety_tracked.json`,
`..._safety_tracked_brake.json`, `..._safety_objects_m0.json`, `..._safety.json`; all but the brake row repaired by
inpainting), and the IDM planner
(`sim_60_val{S}_idm.json`). Printed: PDMS, at-fault collisions, episodes off the road and episodes failing a comfort
bound, and each learned row's paired PDMS difference against reflect off with its standard error. The picture draws
PDMS, at-fault collisions, drives off the road and comfort fails as bars.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path("bench/results")
# label, file pattern ({seed}), method in that file
SETTINGS = [
    ("reflect off (default)", "sim_60_val{seed}_fast_ddrive_brake_objects_bins.json", "speculative"),
    ("static boxes", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety_boxes_m0.json", "speculative+safety"),
    ("tracked boxes", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety_tracked.json", "speculative+safety"),
    ("tracked + brake (round 17)", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety_tracked_brake.json",
     "speculative+safety"),
    ("followers + bends (node)", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety_tracked_brake_ctrv.json",
     "speculative+safety"),
    ("road users, no map", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety_objects_m0.json", "speculative+safety"),
    ("road users + corridor", "sim_60_val{seed}_fast_ddrive_brake_objects_bins_safety.json", "speculative+safety"),
    ("IDM lane follower", "sim_60_val{seed}_idm.json", "idm planner"),
]


def episodes(pattern: str, method: str, seeds: list[int], results: Path) -> dict[int, dict]:
    """Episode seed -> episode record of `method`, pooled over the runs of `seeds`; a missing run, a partial run
    or a run without that method is an error naming the file."""
    out: dict[int, dict] = {}
    for seed in seeds:
        path = results / pattern.format(seed=seed)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no saved run (see the command in docs/reflection.md)")
        data = json.loads(path.read_text())
        if data.get("config", {}).get("partial"):
            raise ValueError(f"{path}: a partial run (stopped before its last episode)")
        got = {int(e["seed"]): e for e in data["episodes"] if e.get("method") == method}
        if not got:
            raise ValueError(f"{path}: no episodes of method {method!r}")
        out.update(got)
    return out


def summary(rows: dict[int, dict], base: dict[int, dict] | None) -> dict:
    keys = sorted(rows)
    pdms = np.array([rows[k]["pdms"] for k in keys])
    out = {"episodes": len(keys), "pdms": float(pdms.mean()),
           "at_fault_collisions": int(sum(rows[k]["at_fault_collisions"] for k in keys)),
           "off_road": int(sum(rows[k]["dac"] == 0 for k in keys)),
           "comfort_fails": int(sum(rows[k]["comfort"] < 1 for k in keys))}
    if base is not None:
        if sorted(base) != keys:
            raise ValueError("the runs do not hold the same episodes as reflect off")
        d = pdms - np.array([base[k]["pdms"] for k in keys])
        out["pdms_diff"], out["pdms_diff_se"] = float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="31,131,231,331,431,531", help="validation episode seeds of the saved runs")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    results = Path(args.results)
    base = episodes(SETTINGS[0][1], SETTINGS[0][2], seeds, results)
    table = []
    for i, (label, pattern, method) in enumerate(SETTINGS):
        rows = episodes(pattern, method, seeds, results)
        learned = method != "idm planner"
        table.append({"setting": label, **summary(rows, base if learned and i > 0 else None)})
    print(f"| setting ({table[0]['episodes']} episodes, seeds {args.seeds}) | PDMS | paired diff vs reflect off (SE) | "
          "at-fault collisions | off the road | comfort fails |\n|---|---|---|---|---|---|")
    for r in table:
        diff = f"{r['pdms_diff']:+.3f} ({r['pdms_diff_se']:.3f})" if "pdms_diff" in r else ""
        print(f"| {r['setting']} | {r['pdms']:.3f} | {diff} | {r['at_fault_collisions']} | {r['off_road']} | "
              f"{r['comfort_fails']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": seeds, "rows": table}, indent=1))
    if args.png:
        from ddrive_ros.evaluation import draw

        labels = [r["setting"] for r in table]
        n = table[0]["episodes"]
        charts = [draw.bar_chart(labels, [r["pdms"] for r in table], f"closed-loop PDMS, {n} validation episodes",
                                 value_range=(0.7, 1.0)),
                  draw.bar_chart(labels, [r["at_fault_collisions"] / n for r in table], "at-fault collisions per episode",
                                 value_range=(0.0, 0.12)),
                  draw.bar_chart(labels, [r["off_road"] / n for r in table], "share of episodes off the road",
                                 value_range=(0.0, 0.12)),
                  draw.bar_chart(labels, [r["comfort_fails"] / n for r in table],
                                 "share of episodes failing a comfort bound", value_range=(0.0, 0.25))]
        draw.write_png(args.png, draw.stacked(*charts))
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
