"""`ddrive sim --compare`: two saved runs paired episode by episode."""
from __future__ import annotations

import json
import math

import pytest

from ddrive_ros.sim.compare import compare, paired

BASE_KEYS = {"nc": 1.0, "dac": 1.0, "ep": 0.9, "ttc": 1.0, "comfort": 1.0, "route_compliance": 1.0,
             "at_fault_collisions": 0, "stop_sign_violations": 0}


def episode(method, seed, pdms, kind="curve", **over):
    return {"method": method, "seed": seed, "kind": kind, "nav_command": "FOLLOW_LANE", "pdms": pdms,
            **BASE_KEYS, **over}


def test_paired_difference_and_its_standard_error():
    p = paired([0.5, 0.7, 0.9, 0.1], [0.6, 0.7, 1.0, 0.0])
    assert p["n"] == 4 and math.isclose(p["diff"], 0.025) and (p["up"], p["down"], p["equal"]) == (2, 1, 1)
    d = [0.1, 0.0, 0.1, -0.1]
    sd = math.sqrt(sum((x - 0.025) ** 2 for x in d) / 3)
    assert math.isclose(p["se"], sd / 2)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired([], [])


def test_episodes_pair_by_seed_and_unmatched_seeds_are_reported():
    base = {s: episode("speculative", s, 0.8) for s in (1, 2, 3)}
    new = {s: episode("speculative", s, 0.9, kind="straight" if s == 2 else "curve") for s in (2, 3, 4)}
    new[3]["at_fault_collisions"] = 1
    r = compare(base, new)
    assert (r["paired_episodes"], r["only_base"], r["only_new"]) == (2, 1, 1)
    assert math.isclose(r["metrics"]["pdms"]["diff"], 0.1) and r["metrics"]["at_fault_collisions"]["up"] == 1
    assert set(r["pdms_by_kind"]) == {"curve"}  # the kind comes from the base run's records
    with pytest.raises(ValueError, match="share no episode seed"):
        compare({1: base[1]}, {4: new[4]})


def test_ddrive_sim_compare_reads_two_saved_runs(tmp_path, capsys):
    from ddrive_ros.cli import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"episodes": [episode("speculative", s, 0.5) for s in range(3)]
                             + [episode("idm planner", s, 1.0) for s in range(3)]}))
    b.write_text(json.dumps({"episodes": [episode("speculative", s, 0.5 + 0.1 * s) for s in range(3)]}))
    assert main(["sim", "--compare", str(a), str(b), "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "| pdms | 3 | 0.500 | 0.600 | +0.100 | 0.058 | 2 / 0 / 1 |" in out
    assert json.loads((tmp_path / "cmp.json").read_text())["metrics"]["pdms"]["n"] == 3
    with pytest.raises(SystemExit, match="'idm planner' matches no method rows"):
        main(["sim", "--compare", str(b), str(a), "--compare-method", "idm planner"])
    # two rows of one run: the learned planner against the IDM planner on the same episodes
    assert main(["sim", "--compare", str(a), str(a), "--compare-method", "speculative=idm planner"]) == 0
    assert "| pdms | 3 | 0.500 | 1.000 | +0.500 | 0.000 | 3 / 0 / 0 |" in capsys.readouterr().out
    # a row whose name holds '=' (the N=4 rollouts) pairs with itself, or with another row
    n4 = tmp_path / "n4.json"
    n4.write_text(json.dumps({"episodes": [episode("speculative N=4", s, 0.4) for s in range(3)]
                              + [episode("speculative", s, 0.5) for s in range(3)]}))
    assert main(["sim", "--compare", str(n4), str(n4), "--compare-method", "speculative N=4"]) == 0
    assert "| pdms | 3 | 0.400 | 0.400 | +0.000 | 0.000 | 0 / 0 / 3 |" in capsys.readouterr().out
    assert main(["sim", "--compare", str(n4), str(a), "--compare-method", "speculative N=4=idm planner"]) == 0
    assert "| pdms | 3 | 0.400 | 1.000 | +0.600 | 0.000 | 3 / 0 / 0 |" in capsys.readouterr().out
    (tmp_path / "junk.json").write_text("[1]")
    with pytest.raises(SystemExit, match="not a saved `ddrive sim --json` run"):
        main(["sim", "--compare", str(tmp_path / "junk.json"), str(a)])


def test_ddrive_sim_compare_pools_runs_of_several_seeds(tmp_path, capsys):
    from ddrive_ros.cli import main

    runs = {}
    for name, seeds, pdms in (("a31", (1, 2), 0.5), ("a131", (3, 4), 0.7), ("b31", (1, 2), 0.6), ("b131", (3, 4), 0.7)):
        runs[name] = tmp_path / f"{name}.json"
        runs[name].write_text(json.dumps({"episodes": [episode("speculative", s, pdms) for s in seeds]}))
    base, new = f"{runs['a31']},{runs['a131']}", f"{runs['b31']},{runs['b131']}"
    assert main(["sim", "--compare", base, new, "--json", str(tmp_path / "cmp.json")]) == 0
    assert "| pdms | 4 | 0.600 | 0.650 | +0.050 | 0.029 | 2 / 0 / 2 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "cmp.json").read_text())["paired_episodes"] == 4
    with pytest.raises(SystemExit, match="episode seed 1 is in both"):
        main(["sim", "--compare", f"{runs['a31']},{runs['b31']}", new])
    with pytest.raises(SystemExit, match="at least one saved run on each side"):
        main(["sim", "--compare", ",", new])


def test_ddrive_sim_reads_manoeuvre_resamples_and_refuses_a_negative_count():
    import argparse

    from ddrive_ros.commands.sim import manoeuvre_option

    assert manoeuvre_option(argparse.Namespace(manoeuvre_resamples=None)) == {}  # the planner's default stands
    assert manoeuvre_option(argparse.Namespace(manoeuvre_resamples=6)) == {"manoeuvre_resamples": 6}
    with pytest.raises(ValueError, match="--manoeuvre-resamples must be >= 0"):
        manoeuvre_option(argparse.Namespace(manoeuvre_resamples=-1))


def test_ddrive_sim_safety_perception_is_the_world_in_process_and_tracked_boxes_or_the_ego_over_ros(tmp_path):
    import argparse

    from ddrive_ros.cli import main
    from ddrive_ros.commands.sim import safety_perception

    assert safety_perception(argparse.Namespace(ros=False, safety_perception=None)) == "world"
    assert safety_perception(argparse.Namespace(ros=False, safety_perception="ego")) == "ego"
    assert safety_perception(argparse.Namespace(ros=True, safety_perception=None)) == "tracked"  # bridged, node tracks
    assert safety_perception(argparse.Namespace(ros=True, safety_perception="boxes")) == "boxes"  # track_obstacles off
    assert safety_perception(argparse.Namespace(ros=True, safety_perception="ego")) == "ego"  # none published
    assert safety_perception(argparse.Namespace(ros=False, safety_perception="objects")) == "objects"
    assert safety_perception(argparse.Namespace(ros=False, safety_perception="boxes")) == "boxes"
    for chosen in ("world", "objects"):  # velocities and a map: the node's MarkerArray input carries neither
        with pytest.raises(ValueError, match=f"--safety-perception {chosen} cannot reach the node"):
            safety_perception(argparse.Namespace(ros=True, safety_perception=chosen))
    out = tmp_path / "ego.json"
    assert main(["sim", "--checkpoint", "trajectory_only_tiny", "--episodes", "1", "--seed", "5", "--duration", "4",
                 "--methods", "speculative", "--reflect", "safety", "--safety-perception", "ego", "--latency-ms", "200",
                 "--json", str(out), "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["safety_perception"] == "ego"
    assert [r["method"] for r in doc["rows"]] == ["expert", "speculative+safety"]
    out = tmp_path / "objects.json"  # the road users without the corridor, in-process
    assert main(["sim", "--checkpoint", "trajectory_only_tiny", "--episodes", "1", "--seed", "5", "--duration", "4",
                 "--methods", "speculative", "--reflect", "safety", "--safety-perception", "objects",
                 "--latency-ms", "200", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["config"]["safety_perception"] == "objects"


def test_ddrive_sim_safety_limits_are_checked_names_and_in_process_only(capsys):
    import argparse

    from ddrive_ros.cli import main
    from ddrive_ros.commands.sim import safety_limits, safety_limits_arg

    assert safety_limits_arg("min_ttc_s=2, min_clearance_m=0.5") == {"min_ttc_s": 2.0, "min_clearance_m": 0.5}
    limits = safety_limits(argparse.Namespace(safety_limits={"min_ttc_s": 2.0}))
    assert limits.min_ttc_s == 2.0 and limits.max_decel == 6.0  # the others stay the defaults
    for bad, why in (("ttc=2", "NAME one of"), ("min_ttc_s", "NAME one of"), ("min_ttc_s=soon", "not a number")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            safety_limits_arg(bad)
    assert main(["sim", "--ros", "--episodes", "1", "--methods", "speculative", "--reflect", "safety",
                 "--safety-limits", "min_ttc_s=2", "--no-progress"]) == 1  # refused before a node starts
    assert "--safety-limits applies to in-process planners" in capsys.readouterr().err
