"""RL fine-tuning (training/grpo.py, sim/rl_groups.py): the policy it trains is the one decoding samples
from, a step moves probability toward the better rollout of a group, and `ddrive rl` runs end to end
on real closed-loop episodes."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import yaml

from ddrive_ros import checkpoint as ckpt
from ddrive_ros.planner import Planner, PlannerOptions
from ddrive_ros.training.dataset import observation_tensors
from ddrive_ros.training.dataset import batch_prompts
from ddrive_ros.training.grpo import GrpoLoss, advantages


@pytest.fixture(scope="module")
def observation():
    from ddrive_ros.sim.sample import samples_from_world

    return next(iter(samples_from_world(321, 1, duration_s=8.0, stride_s=1.0, progress=False))).observation


def _inputs(bundle, obs):
    images, ego, nav = observation_tensors([obs], bundle.config)
    return batch_prompts(bundle.model, images, ego, torch.tensor([bundle.tokenizer.id(f"<nav:{n}>") for n in nav]),
                    bundle.tokenizer.bos_id)


def test_advantages_are_group_normalised_with_a_floor():
    r = np.array([[1.0, 0.0, 1.0, 0.0], [0.80, 0.81, 0.80, 0.81], [0.5, 0.5, 0.5, 0.5]])
    a = advantages(r, floor=0.05)
    np.testing.assert_allclose(a[0], [1, -1, 1, -1])
    np.testing.assert_allclose(a[1], [-0.1, 0.1, -0.1, 0.1], atol=1e-9)  # a hair of progress stays a hair
    np.testing.assert_allclose(a[2], 0.0)
    np.testing.assert_allclose(a.mean(1), 0.0, atol=1e-12)


def test_the_trained_policy_is_the_verifier_the_planner_decodes_with(tiny_traj, observation, one_thread):
    planner = Planner(tiny_traj, PlannerOptions(decoder="speculative"))
    plan, ids = planner.plan_and_ids(observation)
    prompt = _inputs(tiny_traj, observation)
    # RL builds the planner's prompt from the same observation
    torch.testing.assert_close(prompt, planner.prompt_for(observation), rtol=1e-5, atol=1e-5)
    loss = GrpoLoss(planner.layout, tiny_traj.config.prompt_len, temperature=1.0, clip=0.2, kl=0.0, draft_weight=0.0)
    with torch.no_grad():
        policy = loss.policy(tiny_traj.model, prompt, torch.from_numpy(ids))
    sel = loss.select
    chosen = policy[0].gather(-1, torch.from_numpy(ids[0])[:, None])[:, 0]
    # greedy speculative == AR greedy: every trajectory token is the teacher-forced policy's argmax
    torch.testing.assert_close(chosen[sel], policy[0].max(-1).values[sel], rtol=0, atol=1e-4)
    # the policy is a distribution over the allowed tokens only
    allowed = loss.streams.allowed
    assert torch.all(policy[0].exp().masked_fill(~allowed, 0).sum(-1)[sel] > 0.999)
    assert torch.all(policy[0][~allowed] < -1e6)


def test_a_step_moves_probability_toward_the_better_rollout(tiny_traj, observation, one_thread):
    bundle = copy.deepcopy(tiny_traj)
    planner = Planner(bundle, PlannerOptions(rollouts=2, rollout_temperature=1.0, seed=3))
    _, ids = planner.plan_and_ids(observation)
    ids = torch.from_numpy(ids)
    loss = GrpoLoss(planner.layout, bundle.config.prompt_len, temperature=1.0, clip=0.2, kl=0.01, draft_weight=0.1)
    assert not torch.equal(ids[0][loss.select], ids[1][loss.select])
    model = bundle.model.train()
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        old = loss.logprobs(model, _inputs(bundle, observation).expand(2, -1, -1), ids)
        ref = loss.logprobs(reference, _inputs(bundle, observation).expand(2, -1, -1), ids)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        parts = loss(model, _inputs(bundle, observation).expand(2, -1, -1), ids, torch.tensor([1.0, -1.0]), old, ref, gen)
        opt.zero_grad()
        parts.total.backward()
        opt.step()
    with torch.no_grad():
        new = loss.logprobs(model, _inputs(bundle, observation).expand(2, -1, -1), ids)
    sel = loss.select
    gain = (new - old)[:, sel].sum(1)
    assert gain[0] > 0 > gain[1], gain
    assert parts.kl > 0 and parts.draft > 0


def test_ddrive_rl_drives_scores_groups_and_writes_a_model_and_a_reward_curve(tiny_traj, tmp_path, one_thread):
    from ddrive_ros.cli import main

    ckpt.save(tiny_traj, tmp_path / "init")
    cfg = {"init": str(tmp_path / "init"), "out": str(tmp_path / "rl"), "iterations": 1, "episodes": 1, "val_episodes": 1,
           "duration_s": 3.0, "rollouts": 3, "temperature": 1.0, "batch_groups": 2, "lr": 1e-3, "seed": 5}
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["rl", "--config", str(tmp_path / "rl.yaml")]) == 0
    (row,) = json.loads((tmp_path / "rl" / "rl_history.json").read_text())
    assert row["groups"] == 5  # 1 s driven after the 2 s history, 5 Hz
    assert 0.0 <= row["reward_mean"] <= row["reward_best_of_group"] <= 1.0
    assert row["updates"] == 2 * -(-row["groups_with_spread"] // 2)  # two epochs over the groups that teach
    assert (tmp_path / "rl" / "rl_reward.png").stat().st_size > 1000
    assert 0.0 <= row["val_pdms"] <= 1.0 and 0.0 <= row["val_pdms_before"] <= 1.0
    trained = ckpt.load(tmp_path / "rl")
    changed = any(not torch.equal(a, b) for a, b in zip(trained.model.state_dict().values(),
                                                       tiny_traj.model.state_dict().values()))
    assert changed == (row["updates"] > 0)
    assert "ddrive rl" in yaml.safe_load((tmp_path / "rl" / "config.yaml").read_text())["meta"]["command"]


def test_unknown_rl_config_keys_are_an_error():
    from ddrive_ros.training.grpo import RLConfig

    with pytest.raises(ValueError, match="unknown rl config keys"):
        RLConfig.from_dict({"iteratons": 3})


def test_ddrive_rl_runs_data_parallel_under_torchrun(tiny_traj, tmp_path):
    """Two gloo ranks, each driving its own episode: they agree on the number of gradient steps (a rank
    with fewer informative groups must not leave the other waiting in an all-reduce) and rank 0 writes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    ckpt.save(tiny_traj, tmp_path / "init")
    cfg = {"init": str(tmp_path / "init"), "out": str(tmp_path / "rl"), "iterations": 1, "episodes": 1,
           "duration_s": 3.0, "rollouts": 3, "temperature": 1.0, "batch_groups": 2, "lr": 1e-3, "seed": 6}
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "ddrive_ros.cli", "rl", "--config", str(tmp_path / "rl.yaml")],
                          cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("rl iteration 0:") == 2  # both ranks collected and updated
    (row,) = json.loads((tmp_path / "rl" / "rl_history.json").read_text())
    assert row["groups"] == 5 and row["updates"] <= 2 * -(-row["groups_with_spread"] // 2)
    ckpt.load(tmp_path / "rl")
