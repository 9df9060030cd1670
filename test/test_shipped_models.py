"""The models committed under models/: they load, they plan, speculative decoding reproduces AR with
far fewer forwards, ONNX Runtime reproduces torch, and they beat constant velocity on held-out episodes.
The full 200-episode acceptance run is marked slow (`pytest -m slow`)."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.planner import Planner, PlannerOptions

SHIPPED = ["fast_ddrive_tiny", "trajectory_only_tiny"]
HELD_OUT_SEED = 777  # training uses seed 1 (config/train/*.yaml); episode seeds derive from it


@pytest.fixture(scope="module")
def held_out():
    from ddrive_ros.sim.sample import samples_from_world

    samples = list(samples_from_world(HELD_OUT_SEED, 12, stride_s=2.0, progress=False))
    return samples[::2][:12]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_loads_and_records_how_it_was_made(name):
    bundle = ckpt.load(name)
    assert "train_config" in bundle.meta and bundle.meta["train_config"]["schema"] == bundle.schema.name
    data = bundle.meta["train_config"]["data"]
    sources = data if isinstance(data, list) else [data]  # a list of sources is their concatenation
    assert sources and all(src["seed"] != HELD_OUT_SEED for src in sources)


@pytest.mark.parametrize("name", SHIPPED)
def test_speculative_gives_the_ar_plan_with_at_least_3x_fewer_forwards(name, held_out):
    bundle = ckpt.load(name)
    ar = Planner(bundle, PlannerOptions(decoder="ar"))
    spec = Planner(bundle, PlannerOptions(decoder="speculative"))
    fwd_ar, fwd_spec = [], []
    for s in held_out[:5]:
        a, b = ar.plan(s.observation), spec.plan(s.observation)
        assert np.array_equal(a.waypoints, b.waypoints) and a.meta == b.meta and a.explanation == b.explanation
        fwd_ar.append(a.stats.forwards)
        fwd_spec.append(b.stats.forwards)
    ratio = np.mean(fwd_ar) / np.mean(fwd_spec)
    # trajectory_only reached 3x with round 18's prefix-noise stage: its verifier no longer copies the error it just
    # corrected into its next draft (3.86x on these five samples, 3.12x on 200 of seed 777; round 6's model: 2.06x)
    assert ratio >= 3.0, (np.mean(fwd_ar), np.mean(fwd_spec))


def test_tree_verification_and_the_kinematic_draft_keep_the_ar_plan_with_fewer_forwards(held_out):
    """trajectory_only: the ego-state draft replaces the cold plan's diffusion draft, and candidate rows
    confirm about two waypoints per verification (decoding/tree.py): the AR plan, token for token."""
    from ddrive_ros.evaluation.evaluate import held_out_samples

    bundle = ckpt.load("trajectory_only_tiny")
    runs = {"ar": PlannerOptions(decoder="ar"), "diffusion draft": PlannerOptions(draft_kinematic=False),
            "kinematic draft": PlannerOptions(), "tree=16": PlannerOptions(knobs={"tree": 16})}
    planners = {k: Planner(bundle, o) for k, o in runs.items()}
    fwd = {k: [] for k in runs}
    for s in held_out[:6]:
        plans = {k: p.plan(s.observation) for k, p in planners.items()}
        for k, plan in plans.items():
            assert np.array_equal(plan.waypoints, plans["ar"].waypoints), k
            fwd[k].append(plan.stats.forwards)
    mean = {k: float(np.mean(v)) for k, v in fwd.items()}
    assert mean["tree=16"] < mean["kinematic draft"] and mean["ar"] >= 2.5 * mean["tree=16"], mean
    # the two cold drafts differ by about half a forward: compared over 40 episodes (one sample each), where
    # the kinematic draft takes 7.95 forwards against the diffusion draft's 8.45 (over 6 samples they can swap)
    cold = {k: [planners[k].plan(s.observation).stats.forwards for s in held_out_samples(HELD_OUT_SEED, 40)]
            for k in ("diffusion draft", "kinematic draft")}
    assert np.mean(cold["kinematic draft"]) < np.mean(cold["diffusion draft"]), {k: np.mean(v) for k, v in cold.items()}


@pytest.mark.parametrize("name", SHIPPED)
def test_onnx_runtime_plans_equal_torch_plans(name, held_out, tmp_path):
    bundle = ckpt.load(name)
    # the tree's candidate rows run on a cache of 8 rows: ONNX Runtime's row-count stores and graphs
    for decoder, knobs in (("speculative", {}), ("ar", {}), ("speculative", {"tree": 8})):
        torch_planner = Planner(bundle, PlannerOptions(decoder=decoder, knobs=knobs))
        onnx_planner = Planner(bundle, PlannerOptions(decoder=decoder, knobs=knobs, backend="onnx",
                                                      backend_options={"onnx_dir": str(tmp_path / decoder), "threads": 1}))
        for s in held_out[:2]:
            a, b = torch_planner.plan(s.observation), onnx_planner.plan(s.observation)
            assert np.array_equal(a.waypoints, b.waypoints) and a.stats.forwards == b.stats.forwards


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_beats_constant_velocity_on_held_out_episodes(name):
    from ddrive_ros.evaluation.evaluate import evaluate

    rows = {r["method"]: r for r in evaluate(name, episodes=16, seed=HELD_OUT_SEED, methods="speculative")}
    assert rows["speculative"]["ade"] < 0.8 * rows["constant velocity"]["ade"]
    if name.startswith("fast_ddrive"):  # the meta's macro-F1 comes with its bootstrap standard error
        assert 0.0 <= rows["speculative"]["lat_macro_f1_se"] < 0.5 and "lon_macro_f1_se" in rows["speculative"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", SHIPPED)
def test_acceptance_on_200_held_out_episodes(name):
    from ddrive_ros.evaluation.evaluate import evaluate

    rows = {r["method"]: r for r in evaluate(name, episodes=200, seed=HELD_OUT_SEED, methods="ar,speculative")}
    assert rows["speculative"]["ade"] <= 0.6 * rows["constant velocity"]["ade"]
    assert rows["speculative"]["forwards_per_plan"] * 2 <= rows["ar"]["forwards_per_plan"]
    if name.startswith("fast_ddrive"):
        assert rows["speculative"]["lat_acc"] >= 0.8
        assert rows["speculative"]["forwards_per_plan"] * 3 <= rows["ar"]["forwards_per_plan"]
