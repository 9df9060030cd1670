"""Closed-loop episodes grouped by situation (ddrive_ros/sim/breakdown.py, `ddrive sim --breakdown`)."""
from __future__ import annotations

import json

import pytest

from ddrive_ros.sim.breakdown import breakdown, markdown, with_situation
from ddrive_ros.sim.sample import episode_seeds
from ddrive_ros.sim.scenario import sample_scenario


def record(method, kind, nav, pdms, *, dac=1.0, at_fault=0, stop=0, red=0, seed=0, ep=1.0, route=1.0):
    return {"method": method, "seed": seed, "kind": kind, "nav_command": nav, "pdms": pdms, "ep": ep, "dac": dac,
            "at_fault_collisions": at_fault, "stop_sign_violations": stop, "red_light_violations": red,
            "route_compliance": route}


def test_groups_count_what_spoilt_each_episode():
    eps = [record("planner", "curve", "FOLLOW_LANE", 0.0, dac=0.0),
           record("planner", "curve", "STOP", 0.8, ep=0.6),
           record("planner", "intersection", "TURN_LEFT", 0.0, at_fault=1, stop=1),
           record("expert", "curve", "FOLLOW_LANE", 1.0),
           # a lane change left undone: PDMS near 1.0, only the route says so
           record("planner", "straight", "CHANGE_LANE_LEFT", 0.99, route=0.0)]
    rows = {(r["method"], r["by"], r["group"]): r for r in breakdown(eps)}
    curve = rows[("planner", "kind", "curve")]
    assert curve["episodes"] == 2 and curve["pdms"] == pytest.approx(0.4) and curve["ep"] == pytest.approx(0.8)
    assert (curve["zero"], curve["off_road"], curve["at_fault"], curve["stop_sign"]) == (1, 1, 0, 0)
    inter = rows[("planner", "kind", "intersection")]
    assert (inter["zero"], inter["at_fault"], inter["stop_sign"], inter["off_road"]) == (1, 1, 1, 0)
    assert rows[("planner", "nav_command", "STOP")]["pdms"] == pytest.approx(0.8)
    assert rows[("expert", "kind", "curve")]["zero"] == 0
    # methods keep the order they were first seen in; the table has one column per method
    assert [r["method"] for r in breakdown(eps)][0] == "planner"
    table = markdown(breakdown(eps))
    assert "| curve | 2 | 0.40 (1 / 0 / 1 / 0 / 0 / 0) | 1.00 (0 / 0 / 0 / 0 / 0 / 0) |" in table
    change = rows[("planner", "nav_command", "CHANGE_LANE_LEFT")]
    assert change["pdms"] == pytest.approx(0.99) and change["off_route"] == 1 and change["zero"] == 0


def test_a_record_without_its_situation_is_named():
    bad = record("planner", "curve", "STOP", 0.5, seed=42)
    del bad["kind"]
    with pytest.raises(KeyError, match="seed 42 has no 'kind'"):
        breakdown([bad])


def test_older_records_get_their_situation_from_the_seed():
    seed = episode_seeds(5, 1)[0]
    sc = sample_scenario(seed, 8.0)
    old = {k: v for k, v in record("planner", "?", "?", 0.5, seed=seed).items() if k not in ("kind", "nav_command")}
    filled = with_situation([old], 8.0)[0]
    assert (filled["kind"], filled["nav_command"]) == (sc.kind, sc.nav_command)
    kept = with_situation([record("planner", "curve", "STOP", 0.5, seed=seed)], 8.0)[0]
    assert (kept["kind"], kept["nav_command"]) == ("curve", "STOP")  # a record's own situation wins


def test_ddrive_sim_breakdown_reads_a_saved_run(tmp_path, capsys):
    from ddrive_ros.cli import main

    seed = episode_seeds(5, 1)[0]
    saved = tmp_path / "sim.json"
    saved.write_text(json.dumps({"config": {"duration_s": 8.0}, "episodes": [
        {k: v for k, v in record("planner", "", "", 0.25, seed=seed, dac=0.0).items() if k not in ("kind", "nav_command")}]}))
    assert main(["sim", "--breakdown", str(saved), "--plot", str(tmp_path / "by_kind.png")]) == 0
    out = capsys.readouterr().out
    assert f"| {sample_scenario(seed, 8.0).kind} | 1 | 0.25 (0 / 0 / 1 / 0 / 0 / 0) |" in out
    assert (tmp_path / "by_kind.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="--plot draws a saved run"):
        main(["sim", "--plot", str(tmp_path / "x.png")])
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a saved `ddrive sim --json` run"):
        main(["sim", "--breakdown", str(tmp_path / "junk.json")])
