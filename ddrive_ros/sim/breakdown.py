"""Where a method fails in the closed loop: its episodes grouped by situation.

The headline row of `ddrive sim` averages over every episode; a planner that drives straight roads
well and leaves the road in every curve looks like a mediocre planner everywhere. Here each
method's episodes are grouped by the scenario's kind (straight, curve, intersection, crosswalk) and
by its navigation command, and each group counts what ended or spoilt its episodes:

| column       | meaning                                                                        |
|--------------|--------------------------------------------------------------------------------|
| episodes     | episodes in the group                                                          |
| pdms         | mean PDMS                                                                      |
| zero         | episodes scoring 0 (an at-fault collision or leaving the drivable area)        |
| at_fault     | episodes with at least one at-fault collision                                  |
| off_road     | episodes whose drivable-area sub-score is below 1                              |
| stop_sign    | episodes with a stop-sign violation                                            |
| red_light    | episodes with a red-light violation                                            |
| off_route    | episodes that did not end on the route (a lane change or turn not made): PDMS  |
|              | does not score this, so a lane change left undone can score near 1.0           |
| ep           | mean ego progress (against the expert's)                                        |

Episode records are `ddrive sim --json`'s `episodes` entries (they carry `kind` and `nav_command`),
so a saved run can be broken down again without driving it.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

GROUPINGS = ("kind", "nav_command")
COUNTS = {  # column -> does this episode count
    "zero": lambda e: e["pdms"] == 0.0,
    "at_fault": lambda e: e["at_fault_collisions"] > 0,
    "off_road": lambda e: e["dac"] < 1.0,
    "stop_sign": lambda e: e["stop_sign_violations"] > 0,
    "red_light": lambda e: e["red_light_violations"] > 0,
    "off_route": lambda e: e["route_compliance"] < 1.0,
}


def situation(scenario) -> dict[str, str]:
    """The grouping keys of one episode, from its scenario."""
    return {"kind": str(scenario.kind), "nav_command": str(scenario.nav_command)}


def with_situation(episodes: Iterable[dict[str, Any]], duration_s: float) -> list[dict[str, Any]]:
    """Episode records with `kind` and `nav_command` filled in from their seed's scenario where a record
    (written before records carried them) lacks them; records that have them are kept as they are."""
    from ddrive_ros.sim.scenario import sample_scenario

    out, cache = [], {}
    for e in episodes:
        if all(k in e for k in GROUPINGS):
            out.append(dict(e))
            continue
        if "seed" not in e:
            raise KeyError("episode record has neither its situation nor a 'seed' to rebuild it from")
        seed = int(e["seed"])
        if seed not in cache:
            cache[seed] = situation(sample_scenario(seed, duration_s))
        out.append({**e, **cache[seed]})
    return out


def breakdown(episodes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows (method, by, group, episodes, pdms, ep, zero, at_fault, off_road, stop_sign, red_light, off_route),
    sorted by method (first-seen order), grouping, then group name. Raises KeyError naming the field
    when an episode record lacks one (e.g. a JSON written before records carried their situation)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    order: list[str] = []
    for e in episodes:
        for key in (*GROUPINGS, "method", "pdms", "ep", "dac", "at_fault_collisions", "stop_sign_violations",
                    "red_light_violations", "route_compliance"):
            if key not in e:
                raise KeyError(f"episode record of seed {e.get('seed')} has no '{key}'")
        if e["method"] not in order:
            order.append(e["method"])
        for by in GROUPINGS:
            groups[(e["method"], by, e[by])].append(e)
    rows = []
    for (method, by, name), eps in groups.items():
        n = len(eps)
        row: dict[str, Any] = {"method": method, "by": by, "group": name, "episodes": n,
                               "pdms": sum(e["pdms"] for e in eps) / n, "ep": sum(e["ep"] for e in eps) / n}
        row.update({col: sum(bool(test(e)) for e in eps) for col, test in COUNTS.items()})
        rows.append(row)
    rows.sort(key=lambda r: (order.index(r["method"]), GROUPINGS.index(r["by"]), r["group"]))
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table per grouping; a column per method's PDMS and its failure counts (n = episodes)."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = []
    for by in GROUPINGS:
        names = sorted({r["group"] for r in rows if r["by"] == by})
        if not names:
            continue
        cell = {(r["method"], r["group"]): r for r in rows if r["by"] == by}
        head = f"| {by} | n | " + " | ".join(f"{m} PDMS (zero / at-fault / off-road / stop / red / off-route)" for m in methods) + " |"
        out += [head, "|" + "---|" * (2 + len(methods))]
        for name in names:
            n = next(cell[(m, name)]["episodes"] for m in methods if (m, name) in cell)
            parts = []
            for m in methods:
                r = cell.get((m, name))
                parts.append("" if r is None else f"{r['pdms']:.2f} ({r['zero']} / {r['at_fault']} / {r['off_road']} / "
                                                  f"{r['stop_sign']} / {r['red_light']} / {r['off_route']})")
            out.append(f"| {name} | {n} | " + " | ".join(parts) + " |")
        out.append("")
    return "\n".join(out).rstrip()


def write_png(rows: list[dict[str, Any]], path: str | Path, by: str = "kind") -> Path:
    """Bars of mean PDMS per (group, method) for one grouping: where each method loses its score."""
    from ddrive_ros.evaluation import draw

    if by not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, not {by!r}")
    picked = [r for r in rows if r["by"] == by]
    if not picked:
        raise ValueError(f"no episodes to draw grouped by {by}")
    picked.sort(key=lambda r: r["group"])  # stable: methods stay in their order inside a group
    img = draw.bar_chart([f"{r['group']}: {r['method']} (n={r['episodes']})" for r in picked],
                         [r["pdms"] for r in picked], title=f"closed-loop PDMS by {by.replace('_', ' ')}", width=720)
    return draw.write_png(Path(path), img)
