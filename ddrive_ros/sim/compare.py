"""Two closed-loop runs of the same episodes, compared episode by episode.

Whether a training stage ships depends on whether it drives better than the model it replaces, on
the same episodes. Closed-loop PDMS varies far more between episodes than between two similar
models (one collision takes an episode from ~0.9 to 0), so the two means are compared as paired
differences: each episode seed driven by both runs gives one difference; their mean and its
standard error say whether a gap is larger than the episodes' noise. Episodes are matched by seed,
so both runs must have used the same `--seed` and `--episodes` (unmatched seeds are reported and
left out). Each side may be several saved runs (one per `--seed`: validation seeds 31, 131, ...): their
episodes are pooled, so one paired mean and standard error cover every validation episode at once.

Per sub-score and per situation (the scenario's kind, breakdown.py) it prints: episodes paired, the
two means, the mean difference (new - base) with its standard error, and in how many episodes the
value went up, down or stayed (up is better for the sub-scores, worse for violation counts).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

METRICS = ("pdms", "nc", "dac", "ep", "ttc", "comfort", "route_compliance", "at_fault_collisions",
           "stop_sign_violations", "accel_swings")


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """The episode records of a saved `ddrive sim --json` run."""
    try:
        episodes = json.loads(Path(path).read_text())["episodes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a saved `ddrive sim --json` run ({e})") from e
    if not isinstance(episodes, list) or not all(isinstance(e, dict) for e in episodes):
        raise ValueError(f"{path}: not a saved `ddrive sim --json` run (its episodes are not a list of records)")
    return episodes


def _methods(episodes: list[dict[str, Any]]) -> set[str]:
    return {str(e.get("method")) for e in episodes}


def methods_in(path: Path) -> set[str]:
    """The method rows a saved `ddrive sim --json` run holds episodes of."""
    return _methods(read_episodes(path))


def load_episodes(path: Path, method: str) -> dict[int, dict[str, Any]]:
    """One method's episode records of a saved `ddrive sim --json` run, keyed by episode seed."""
    episodes = read_episodes(path)
    mine = {int(e["seed"]): e for e in episodes if e.get("method") == method}
    if not mine:
        methods = sorted(_methods(episodes))
        raise ValueError(f"{path}: no episodes of method {method!r}; it has {methods}")
    return mine


def method_pair(spec: str, base: set[str], new: set[str]) -> tuple[str, str]:
    """`--compare-method` read against the runs' method names: one name pairs that row with itself,
    BASE=NEW two rows. A name may hold '=' itself ("speculative N=4"), so every split is tried and the
    one whose halves both exist wins; none or several is an error naming the methods there are."""
    options = [(spec, spec)] + [(spec[:i], spec[i + 1:]) for i, c in enumerate(spec) if c == "="]
    found = [(b, n) for b, n in options if b in base and n in new]
    if not found:
        raise ValueError(f"--compare-method {spec!r} matches no method rows of the runs "
                         f"(base has {sorted(base)}, new has {sorted(new)})")
    if len(found) > 1:
        raise ValueError(f"--compare-method {spec!r} is ambiguous: " + " or ".join(f"{b!r}={n!r}" for b, n in found))
    return found[0]


def load_runs(paths: list[Path], method: str) -> dict[int, dict[str, Any]]:
    """One method's episodes of several saved runs, pooled by episode seed. An episode seed found in two
    of them is an error (the same episodes counted twice would halve the standard error for nothing)."""
    pooled: dict[int, dict[str, Any]] = {}
    where: dict[int, Path] = {}
    for path in paths:
        for seed, record in load_episodes(path, method).items():
            if seed in pooled:
                raise ValueError(f"episode seed {seed} is in both {where[seed]} and {path}: pool runs of different "
                                 f"--seed values only")
            pooled[seed], where[seed] = record, Path(path)
    return pooled


def paired(base: list[float], new: list[float]) -> dict[str, float]:
    """Mean of each, mean difference (new - base), its standard error, and how many episodes went up/down/equal."""
    n = len(base)
    if n == 0 or n != len(new):
        raise ValueError(f"paired comparison needs equal, non-empty lists (got {len(base)} and {len(new)})")
    d = [b - a for a, b in zip(base, new)]
    mean = sum(d) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else float("nan")
    return {"n": n, "base": sum(base) / n, "new": sum(new) / n, "diff": mean, "se": se,
            "up": sum(x > 1e-9 for x in d), "down": sum(x < -1e-9 for x in d),
            "equal": sum(abs(x) <= 1e-9 for x in d)}


def compare(base: dict[int, dict[str, Any]], new: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Paired differences per metric over the seeds both runs drove, and PDMS per scenario kind."""
    seeds = sorted(set(base) & set(new))
    if not seeds:
        raise ValueError("the two runs share no episode seed: run both with the same --seed and --episodes")
    overall = {m: paired([float(base[s][m]) for s in seeds], [float(new[s][m]) for s in seeds])
               for m in METRICS if all(m in base[s] and m in new[s] for s in seeds)}
    groups: dict[str, list[int]] = defaultdict(list)
    for s in seeds:
        groups[str(base[s].get("kind", "?"))].append(s)
    by_kind = {k: paired([float(base[s]["pdms"]) for s in ss], [float(new[s]["pdms"]) for s in ss])
               for k, ss in sorted(groups.items())}
    return {"paired_episodes": len(seeds), "only_base": len(set(base) - set(new)),
            "only_new": len(set(new) - set(base)), "metrics": overall, "pdms_by_kind": by_kind}


def markdown(result: dict[str, Any], base_name: str, new_name: str) -> str:
    head = (f"{result['paired_episodes']} episodes driven by both (left out: {result['only_base']} only in base, "
            f"{result['only_new']} only in new); diff = new - base, SE its standard error\n\n")
    lines = [f"| metric | episodes | {base_name} | {new_name} | diff | SE | up / down / equal |",
             "|---|---|---|---|---|---|---|"]

    def row(label: str, p: dict[str, float]) -> str:
        return (f"| {label} | {p['n']} | {p['base']:.3f} | {p['new']:.3f} | {p['diff']:+.3f} | {p['se']:.3f} | "
                f"{p['up']} / {p['down']} / {p['equal']} |")

    lines += [row(m, p) for m, p in result["metrics"].items()]
    lines += [row(f"pdms, {k}", p) for k, p in result["pdms_by_kind"].items()]
    return head + "\n".join(lines)
