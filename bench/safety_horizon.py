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

With `--trace-episode E --trace-seed S` it also drives one validation episode (E, of `ddrive sim --seed S`) as those
runs did, judged over the whole plan and up to 2 s, and draws the ego's speed over time for both and for the expert,
marking the plans whose draft the check found meeting a road user (`--trace-png`):

    .venv/bin/python bench/safety_horizon.py --trace-seed 431 --trace-episode 3897315495 \
        --trace-png docs/safety_horizon_episode.png
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


def drive(episode: int, horizon_s: float | None, opts):
    """The node's setting on one episode with the check judging road users up to horizon_s (None: the whole plan):
    the run, and the times of the plans whose draft met a road user."""
    from ddrive_ros import checkpoint as ckpt
    from ddrive_ros.planner import Planner
    from ddrive_ros.planner_options import PlannerOptions
    from ddrive_ros.reflection.safety import ROAD_USER_KINDS, Limits
    from ddrive_ros.sim.closed_loop_run import run_episode
    from ddrive_ros.sim.drivers import ModelDriver
    from ddrive_ros.sim.safety_context import TrackedBoxes

    planner = Planner(ckpt.load("fast_ddrive_tiny"), PlannerOptions(decoder="speculative", reflect="safety",
                                                                     safety_repair="brake"))
    flagged: list[float] = []

    class Marking:
        def plan(self, obs, context=None):
            plan = planner.plan(obs, context)
            before = plan.stats.reflect.get("violations_before", [[]])[0] if plan.stats else []
            if ROAD_USER_KINDS & set(before):
                flagged.append(float(obs.stamp))
            return plan

    driver = ModelDriver(Marking(), planner.restart_sampling, TrackedBoxes(Limits(road_user_horizon_s=horizon_s)))
    expert = run_episode(episode, "expert", None, opts)
    return expert, run_episode(episode, "learned", lambda w: driver.bind(w), opts, expert.score.progress_m), flagged


def trace(seed: int, episode: int, png: str) -> None:
    """--trace-episode: the ego's speed on one episode, the check over the whole plan and up to 2 s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import torch

    from ddrive_ros.sim.closed_loop_run import LoopOptions
    from ddrive_ros.sim.sample import default_renderer

    torch.set_num_threads(1)
    opts = LoopOptions(latency_ms=200.0)
    opts.renderer = default_renderer()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for horizon, colour, name in ((None, "tab:red", "whole plan (5 s)"), (2.0, "tab:blue", "up to 2 s (default)")):
        expert, run, flagged = drive(episode, horizon, opts)
        k0 = run.world.start_step
        t = run.world.t[k0:] - run.world.t[k0]
        v = run.world.ego_v[k0:len(t) + k0]
        if horizon is None:
            ax.plot(expert.world.t[k0:] - expert.world.t[k0], expert.world.ego_v[k0:], color="tab:green",
                    label="expert")
        ax.plot(t, v, color=colour, label=f"{name}: PDMS {run.score.pdms:.2f}, EP {run.score.ep:.2f}")
        at = np.asarray(flagged) - run.world.t[k0]
        ax.plot(at, np.interp(at, t, v), "v", color=colour, markersize=5, linestyle="none",
                label=f"{len(flagged)} plans met a road user")
        print(f"{name}: PDMS {run.score.pdms:.3f}, EP {run.score.ep:.3f}, {len(flagged)} plans met a road user")
    ax.set_xlabel("s into the episode")
    ax.set_ylabel("ego speed (m/s)")
    ax.set_title(f"validation episode {episode} (seed {seed}), node's setting", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizons", default="3.0,2.0,1.5", help="the horizons (s) with saved runs, comma-separated")
    ap.add_argument("--png", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--trace-seed", type=int, default=None, help="validation `ddrive sim --seed` of --trace-episode")
    ap.add_argument("--trace-episode", type=int, default=None, help="an episode seed of that run to drive and draw")
    ap.add_argument("--trace-png", default="docs/safety_horizon_episode.png")
    args = ap.parse_args(argv)
    if args.trace_episode is not None:
        if args.trace_seed not in SEEDS:
            raise SystemExit(f"--trace-seed must be one of the validation seeds {SEEDS} (the held-out seed is for "
                             f"reporting), got {args.trace_seed}")
        trace(args.trace_seed, args.trace_episode, args.trace_png)
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
