"""The closed loop: the world and the scorer agree (expert ~ 1), trivial baselines score lower,
latency is applied honestly, runs are deterministic, and `ddrive sim` runs end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.closed_loop_run import LoopOptions, run_episode, run_methods
from ddrive_ros.sim.drivers import ConstantVelocityDriver, IdmPlannerDriver, trajectory_plan
from ddrive_ros.sim.sample import episode_seeds
from ddrive_ros.sim.world import Episode
from ddrive_ros.timeline import OUTPUT_TIMES

SEEDS = episode_seeds(777, 16)  # the held-out seed's first episodes


@pytest.fixture(scope="module")
def baseline_rows():
    results = run_methods({"constant velocity": lambda w: ConstantVelocityDriver(), "idm planner": IdmPlannerDriver},
                          SEEDS, LoopOptions(latency_ms=200.0), progress=False)
    return {r.method: r.row() for r in results}


def test_the_expert_scores_at_least_095_and_constant_velocity_clearly_lower(baseline_rows):
    assert baseline_rows["expert"]["pdms"] >= 0.95
    assert baseline_rows["constant velocity"]["pdms"] < baseline_rows["expert"]["pdms"] - 0.15
    # the rule-based planner drives through the same controller and latency and stays close to the ceiling
    assert baseline_rows["idm planner"]["pdms"] >= 0.9
    assert baseline_rows["constant velocity"]["route_compliance"] < baseline_rows["idm planner"]["route_compliance"]


def test_the_closed_loop_expert_drives_as_the_precomputed_episode_until_pedestrians_yield():
    seed = SEEDS[0]
    ep = Episode(seed, 8.0)
    world = ClosedLoopWorld(seed, 8.0)
    while not world.done:
        world.step_expert()
    assert world.terminated == "duration"
    if not ep.scenario.road_map.crosswalks:
        np.testing.assert_allclose(world.ego_xy, ep.ego_xy, atol=1e-9)
        np.testing.assert_allclose(world.agent_xy, ep.agent_xy, atol=1e-9)


class _SlowStraight:
    """A driver that plans straight at its speed and claims each plan took 0.45 s."""

    def __init__(self) -> None:
        self.v = 0.0

    def begin_episode(self, seed: int) -> None:
        pass

    def observe(self, state, nav_command, images) -> None:
        self.v = float(state[4])

    def plan(self, t: float):
        xy = np.stack([self.v * OUTPUT_TIMES, np.zeros_like(OUTPUT_TIMES)], 1)
        return trajectory_plan(xy, t, self.v, "test"), 0.45


def test_measured_latency_delays_each_plan_and_a_busy_planner_skips_ticks():
    run = run_episode(SEEDS[1], "slow", lambda w: _SlowStraight(), LoopOptions(duration_s=5.0, latency_ms=None))
    lags = {p.k_apply - p.k_obs for p in run.plans}
    assert lags == {9}  # 0.45 s rounds up to 9 steps of 50 ms
    gaps = np.diff([p.k_obs for p in run.plans])
    assert np.all(gaps == 12)  # busy for 9 steps: the 4-step ticks at +4 and +8 are skipped, +12 is taken
    fixed = run_episode(SEEDS[1], "slow", lambda w: _SlowStraight(), LoopOptions(duration_s=5.0, latency_ms=100.0))
    assert {p.k_apply - p.k_obs for p in fixed.plans} == {2} and np.all(np.diff([p.k_obs for p in fixed.plans]) == 4)


def test_same_seed_same_scores():
    a = run_episode(SEEDS[2], "idm", IdmPlannerDriver, LoopOptions(latency_ms=200.0))
    b = run_episode(SEEDS[2], "idm", IdmPlannerDriver, LoopOptions(latency_ms=200.0))
    assert a.score.to_dict() == b.score.to_dict()
    np.testing.assert_array_equal(a.world.ego_xy, b.world.ego_xy)


def test_a_collision_ends_the_episode_and_zeroes_nc():
    # constant velocity on the held-out episodes rear-ends somebody; find one and check the bookkeeping
    for seed in SEEDS:
        run = run_episode(seed, "cv", lambda w: ConstantVelocityDriver(), LoopOptions(latency_ms=200.0))
        if run.world.terminated == "collision":
            assert run.world.k < run.world.n_steps - 1
            assert run.score.collisions >= 1
            return
    pytest.fail("constant velocity never collided on 16 held-out episodes")


def test_ddrive_sim_two_short_episodes_in_process(tmp_path):
    """CI smoke: the command with the shipped model, two short episodes, JSON + MP4 + summary PNG."""
    from ddrive_ros.cli import main

    out = tmp_path / "sim.json"
    rc = main(["sim", "--episodes", "2", "--seed", "3", "--duration", "4", "--methods", "cv,speculative",
               "--latency-ms", "200", "--json", str(out), "--video", str(tmp_path / "video"), "--video-episodes", "1",
               "--no-progress"])
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = {r["method"]: r for r in doc["rows"]}
    assert set(rows) == {"expert", "constant velocity", "speculative"}
    for r in rows.values():
        for k in ("pdms", "nc", "dac", "ep", "ttc", "comfort", "red_light_per_km", "route_compliance",
                  "collisions_per_km", "episodes"):
            assert k in r
        assert r["episodes"] == 2 and 0.0 <= r["pdms"] <= 1.0
    assert rows["speculative"]["plan_ms"] > 0 and rows["speculative"]["latency_ms"] == pytest.approx(200.0)
    assert {e["kind"] for e in doc["episodes"]} <= {"straight", "curve", "intersection", "crosswalk"}
    assert sum(r["episodes"] for r in doc["by_situation"] if r["method"] == "speculative" and r["by"] == "kind") == 2
    assert len(list((tmp_path / "video").glob("*.mp4"))) == 1
    assert (tmp_path / "video" / "pdms_by_method.png").stat().st_size > 1000
    assert (tmp_path / "video" / "pdms_by_situation.png").stat().st_size > 1000


def test_open_loop_pdm_navsim_protocol_expert_future_scores_one_constant_velocity_lower():
    """`ddrive eval`'s PDMS: the expert's own recorded future, tracked 4 s, is the ceiling; holding
    speed and yaw rate through lights and leads is not; a plan that stands still makes no progress."""
    from ddrive_ros.evaluation.evaluate import held_out_samples
    from ddrive_ros.evaluation.metrics import constant_velocity_prediction
    from ddrive_ros.sim.open_loop_pdm import open_loop_pdm, pdm_summary

    samples = held_out_samples(777, 16)
    times = samples[0].future_times
    expert = pdm_summary([s.future_xy for s in samples], times, samples)
    cv = pdm_summary([constant_velocity_prediction(s.observation.speed, s.observation.yaw_rate, times)
                      for s in samples], times, samples)
    assert expert["pdms"] >= 0.95 and expert["nc"] == 1.0 and expert["dac"] == 1.0
    assert cv["pdms"] < expert["pdms"] - 0.1
    moving = next(s for s in samples if s.future_xy[-1, 0] > 20.0)
    stand = open_loop_pdm(np.zeros_like(moving.future_xy), times, moving)
    assert stand.ep < 0.5 and stand.progress_m < 0.5 * open_loop_pdm(moving.future_xy, times, moving).progress_m


def test_a_plan_scored_in_a_fork_leaves_the_world_as_it_was_and_ranks_plans_like_the_scorer():
    """The oracle's scorer: the fork is independent of the world; the expert's own next 4 s score
    full marks, standing still loses progress, a plan off the road loses drivable area."""
    from ddrive_ros.sim.closed_loop import ClosedLoopWorld
    from ddrive_ros.sim.fork_score import expert_progress, fork, score_in_fork
    from ddrive_ros.trajectory import world_to_ego

    world = ClosedLoopWorld(777, 10.0)
    world.drive_expert_until(world.start_step + 10)
    k, snapshot = world.k, (world.ego_xy.copy(), world.agent_xy.copy(), world.traffic.v.copy())
    ahead = fork(world)
    ahead.drive_expert_until(k + 80)  # the expert's next 4 s, in a fork
    assert world.k == k and np.array_equal(world.ego_xy, snapshot[0]) and np.array_equal(world.agent_xy, snapshot[1])
    assert np.array_equal(world.traffic.v, snapshot[2])
    times = np.arange(1, 9) * 0.5
    steps = k + np.round(times / 0.05).astype(int)
    expert_xy = world_to_ego(ahead.ego_xy[steps], ahead.ego_xy[k], float(ahead.ego_yaw[k]))

    def traj(xy):
        return np.column_stack([times, xy, np.zeros(len(times)), np.zeros(len(times))])

    reference = expert_progress(world)
    assert reference > 5.0
    good = score_in_fork(world, traj(expert_xy), reference)
    still = score_in_fork(world, traj(np.zeros_like(expert_xy)), reference)
    off = score_in_fork(world, traj(expert_xy + np.column_stack([np.zeros(8), np.linspace(2, 30, 8)])), reference)
    assert good.nc == 1.0 and good.dac == 1.0 and good.ep > 0.9, good
    assert still.ep < 0.5 and still.pdms < good.pdms  # it brakes to a stop: a few metres
    assert off.dac == 0.0 and off.pdms == 0.0
    assert world.k == k and np.array_equal(world.ego_xy, snapshot[0])
    # with a tail the expert drives on after the plan, and the score covers both stretches
    long_ref = expert_progress(world, 4.0 + 3.0)
    good_tail = score_in_fork(world, traj(expert_xy), long_ref, tail_s=3.0)
    still_tail = score_in_fork(world, traj(np.zeros_like(expert_xy)), long_ref, tail_s=3.0)
    assert long_ref >= reference  # (this expert stops at the line soon after the first 4 s)
    assert good_tail.duration_s > good.duration_s + 2.5 and good_tail.progress_m >= good.progress_m
    assert good_tail.nc == 1.0 and good_tail.ep > 0.9, good_tail
    assert still_tail.progress_m > still.progress_m  # the expert drives on from the standstill
    assert world.k == k and np.array_equal(world.ego_xy, snapshot[0])


def test_dagger_labels_the_states_the_planner_drove_into_with_the_experts_future(one_thread):
    """One closed-loop episode of the shipped trajectory_only planner: every plan's observation comes back
    with the expert's 5 s future from that very state, in that observation's ego frame; only the
    trajectory is labelled. Training takes them as `data: {source: dagger, ...}`."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.dagger import collect
    from ddrive_ros.training.sources import load_samples

    samples = collect(Planner.from_checkpoint("trajectory_only_tiny"), seed=6, episodes=1, progress=False)
    assert len(samples) >= 10
    for s in samples:
        assert s.source == "dagger" and s.has_labels["trajectory"]
        assert not any(v for k, v in s.has_labels.items() if k != "trajectory")
        assert s.observation.images.shape[:2] == (2, 3) and abs(s.observation.stamp - s.t0) < 1e-9
        # the expert drives forward from where the planner brought the ego (or waits there, at a stop line):
        # ahead, near the lane
        assert s.future_xy[0, 0] >= 0.0 and np.all(np.diff(s.future_xy[:, 0]) >= -1e-6) and abs(s.future_xy[0, 1]) < 1.0
    # this episode has a stop: the planner brakes to it (the expert's futures shrink from 12 m to 0; a planner
    # that stops sooner sees the expert pull away again before the episode ends)
    reach = [float(s.future_xy[-1, 0]) for s in samples]
    assert reach[0] > 5.0 and min(reach) < 0.5 and reach.index(min(reach)) > 5
    with pytest.raises(ValueError, match="needs"):
        load_samples([{"source": "dagger", "checkpoint": "trajectory_only_tiny"}])


def test_dagger_in_two_processes_collects_the_same_samples_in_the_same_order(one_thread):
    """`workers: 2` spreads the episodes over two processes (each loads the checkpoint once): every episode
    restarts the planner's sampling, so the samples are the one-process ones, sample for sample."""
    from ddrive_ros.training.sources import load_samples

    entry = {"source": "dagger", "checkpoint": "trajectory_only_tiny", "seed": 6, "episodes": 2}
    one = load_samples(entry)
    two = load_samples(dict(entry, workers=2))
    assert len(one) == len(two) > 10
    for a, b in zip(one, two):
        assert a.t0 == b.t0 and np.array_equal(a.future_xy, b.future_xy)
        assert np.array_equal(a.observation.images, b.observation.images) and a.observation.speed == b.observation.speed
    with pytest.raises(ValueError, match="workers"):
        load_samples(dict(entry, workers=0))
    with pytest.raises(ValueError, match="unknown keys"):
        load_samples(dict(entry, worker=2))


def test_dagger_with_commands_and_meta_labels(one_thread):
    """`commands` in a dagger entry keeps, among the `episodes` drawn from `seed`, those whose navigation command is
    listed, as a world entry does: of seed 7's first three episodes only the third changes lanes, so the entry
    gives exactly that episode's samples. With `label_meta` each sample's meta behaviour is labelled from the state
    the planner drove into, by the world samples' rule: at the first plan that state is the expert's own (the same
    label as the open-loop sample at that time), and later, where trajectory_only_tiny has stayed in its lane (it
    makes no lane change), the label still says LEFT_CHANGE while the expert's own episode has long finished it
    (STRAIGHT). Bad values are refused before anything drives."""
    from ddrive_ros.planner import Planner
    from ddrive_ros.sim.dagger import EPISODE_S, collect_episodes
    from ddrive_ros.sim.labels import meta_behavior
    from ddrive_ros.sim.sample import episode_seeds
    from ddrive_ros.sim.scenario import sample_scenario
    from ddrive_ros.sim.world import Episode
    from ddrive_ros.training.sources import load_samples

    seeds = episode_seeds(7, 3)
    commands = [sample_scenario(s, EPISODE_S).nav_command for s in seeds]
    assert commands == ["FOLLOW_LANE", "FOLLOW_LANE", "CHANGE_LANE_LEFT"]
    entry = {"source": "dagger", "checkpoint": "trajectory_only_tiny", "seed": 7, "episodes": 3,
             "commands": ["CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT"], "label_meta": True}
    kept = load_samples(entry)
    alone, _ = collect_episodes(Planner.from_checkpoint("trajectory_only_tiny"), [seeds[2]], progress=False)
    assert len(kept) == len(alone) >= 10
    for a, b in zip(kept, alone):
        assert a.t0 == b.t0 and np.array_equal(a.future_xy, b.future_xy)
        assert a.has_labels["future_meta_behavior"] and not b.has_labels["future_meta_behavior"] and b.labels.meta is None
    expert = Episode(seeds[2], EPISODE_S)
    step = [int(round(s.t0 / expert.dt)) for s in kept]
    assert kept[0].labels.meta == meta_behavior(expert, step[0])
    assert kept[-1].labels.meta.lateral == "LEFT_CHANGE" and abs(kept[-1].future_xy[-1, 1]) > 2.0
    assert meta_behavior(expert, step[-1]).lateral == "STRAIGHT"
    for bad, match in ((dict(commands=["TURN_SIDEWAYS"]), "each must be one of"),
                       (dict(commands="TURN_LEFT"), "list of navigation commands"),
                       (dict(label_meta="yes"), "label_meta")):
        with pytest.raises(ValueError, match=match):
            load_samples(dict(entry, **bad))


def test_dagger_with_safety_reflection_labels_where_the_nodes_repairs_take_the_ego(one_thread):
    """`reflect: safety`: the planner checks and repairs its plans against the road users' boxes tracked as the node
    tracks them, so it drives elsewhere than without (here from its third plan on: seed 11, a road user within the
    check's 2 s horizon; seed 6's episode, used before the horizon, now has none), and the expert labels those
    states. An unknown mode is refused before anything drives."""
    from ddrive_ros.training.sources import load_samples

    entry = {"source": "dagger", "checkpoint": "fast_ddrive_tiny", "seed": 11, "episodes": 1}
    off, on = load_samples(entry), load_samples(dict(entry, reflect="safety"))
    assert len(on) >= 10 and all(s.source == "dagger" and s.has_labels["trajectory"] for s in on)
    speeds_off = [s.observation.speed for s in off]
    speeds_on = [s.observation.speed for s in on]
    assert speeds_on[:2] == speeds_off[:2] and speeds_on != speeds_off[:len(speeds_on)]
    with pytest.raises(ValueError, match="reflect"):
        load_samples(dict(entry, reflect="autoedit"))


def test_closed_loop_speculative_drives_exactly_as_ar_with_fewer_forwards(tmp_path):
    """On a stream each plan drafts from the previous one: the same drive as AR (greedy plans are AR's),
    and the rows say how many backbone forwards each plan cost."""
    from ddrive_ros.cli import main

    out = tmp_path / "sim.json"
    rc = main(["sim", "--checkpoint", "trajectory_only_tiny", "--episodes", "1", "--seed", "5", "--duration", "4",
               "--methods", "ar,speculative", "--latency-ms", "200", "--json", str(out), "--no-progress"])
    assert rc == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    # the same tokens; the float work after them (interpolation, control) may differ in the last bits
    for k in ("pdms", "nc", "dac", "ep", "ttc", "comfort", "mean_speed_mps"):
        assert rows["speculative"][k] == pytest.approx(rows["ar"][k], rel=1e-9, abs=1e-12), k
    assert rows["ar"]["forwards_per_plan"] == 17.0  # prefill + 16 waypoint tokens (the last one needs no commit)
    assert rows["speculative"]["forwards_per_plan"] < 12.0  # at least 1.5x fewer than AR
    assert rows["expert"]["forwards_per_plan"] is None
    # every plan drafted cold (from the ego state) and verified over 8 candidate rows: the same drive again,
    # other forwards
    cold = tmp_path / "cold.json"
    assert main(["sim", "--checkpoint", "trajectory_only_tiny", "--episodes", "1", "--seed", "5", "--duration", "4",
                 "--methods", "speculative", "--latency-ms", "200", "--no-draft-previous", "--tree-rows", "8",
                 "--json", str(cold), "--no-progress"]) == 0
    cold_row = next(r for r in json.loads(cold.read_text())["rows"] if r["method"] == "speculative")
    assert cold_row["pdms"] == pytest.approx(rows["ar"]["pdms"], rel=1e-9, abs=1e-12)
    assert cold_row["ep"] == pytest.approx(rows["ar"]["ep"], rel=1e-9, abs=1e-12)
    assert cold_row["forwards_per_plan"] != rows["speculative"]["forwards_per_plan"]
    assert cold_row["forwards_per_plan"] < 0.5 * rows["ar"]["forwards_per_plan"]
