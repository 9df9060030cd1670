"""Decoders over the shared block loop, held to the uncached reference and to AR greedy."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from ddrive_ros.checkpoint import build_random
from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.reference import ReferenceBackend
from ddrive_ros.decoding.strategies import S2D2, make_strategy
from ddrive_ros.runtime.torch_backend import TorchBackend
from ddrive_ros.scaffold.layout import Layout

DECODERS = [("ar", {}), ("diffusion", {"tau": 0.9}), ("diffusion", {"steps": 3, "tau": 1.01}),
            ("speculative", {}), ("s2d2", {"policy": "always"}), ("s2d2", {"policy": "score"}),
            ("s2d2", {"policy": "hysteresis", "confidence": "entropy"})]


class Recording:
    """Wraps a backend and keeps every logit it returns (to compare cached and uncached)."""

    def __init__(self, backend):
        self.inner = backend
        self.name, self.prompt_len, self.window, self.vocab_size = backend.name, backend.prompt_len, backend.window, backend.vocab_size
        self.dynamic_windows = getattr(backend, "dynamic_windows", False)  # windows may start inside a block
        self.outputs: list[torch.Tensor] = []

    def prompt(self, *a):
        return self.inner.prompt(*a)

    def prefill(self, p):
        self.outputs.append(self.inner.prefill(p))
        return self.outputs[-1]

    def step(self, tokens, start, valid, bidirectional, action):
        out = self.inner.step(tokens, start, valid, bidirectional, action)
        self.outputs.append(out[:, :valid])  # positions past the block's end are padding, never read
        return out

    def fork(self, *a):
        self.inner.fork(*a)


def inputs(bundle, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, w = bundle.config.vision.image_size
    images = torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8)
    ego = torch.randn(1, 11, generator=g)
    tok = bundle.tokenizer
    return images, ego, torch.tensor([tok.bos_id]), torch.tensor([tok.id("<nav:FOLLOW_LANE>")])


def layout_for(bundle, decoder, block_size=None):
    bs = 1 if decoder == "ar" else (block_size or bundle.schema.default_block_size)
    return Layout(bundle.schema, bundle.tokenizer, bs)


def run(bundle, backend_cls, decoder, knobs, options=None, block_size=None, rows=1):
    layout = layout_for(bundle, decoder, block_size)
    backend = Recording(backend_cls(bundle.model, layout.window, max_rows=rows))
    prompt = backend.prompt(*inputs(bundle))
    ids, stats = decode(backend, layout, prompt, make_strategy(decoder, **knobs), options)
    return ids, stats, backend.outputs


@pytest.mark.parametrize("decoder,knobs", DECODERS)
def test_cached_decoding_equals_uncached_reference(tiny_traj, decoder, knobs):
    ids, stats, logits = run(tiny_traj, TorchBackend, decoder, knobs)
    ref_ids, ref_stats, ref_logits = run(tiny_traj, ReferenceBackend, decoder, knobs)
    assert torch.equal(ids, ref_ids)
    assert stats.forwards == ref_stats.forwards == len(logits)
    assert max((a - b).abs().max().item() for a, b in zip(logits, ref_logits)) < 1e-4


def test_cached_decoding_equals_reference_on_the_full_schema(tiny_fast, decoder="speculative"):
    ids, _, logits = run(tiny_fast, TorchBackend, decoder, {})
    ref_ids, _, ref_logits = run(tiny_fast, ReferenceBackend, decoder, {})
    assert torch.equal(ids, ref_ids)
    assert max((a - b).abs().max().item() for a, b in zip(logits, ref_logits)) < 1e-4


def test_multi_rollout_cached_equals_reference(tiny_traj):
    opt = DecodeOptions(rollouts=3, rollout_temperature=1.0, seed=5)
    ids, _, logits = run(tiny_traj, TorchBackend, "speculative", {}, opt, rows=3)
    ref_ids, _, ref_logits = run(tiny_traj, ReferenceBackend, "speculative", {}, opt, rows=3)
    assert ids.shape[0] == 3 and torch.equal(ids, ref_ids)
    assert max((a - b).abs().max().item() for a, b in zip(logits, ref_logits)) < 1e-4


def test_section_diffusion_at_block_size_one_is_ar_greedy(tiny_fast):
    ar, _, _ = run(tiny_fast, TorchBackend, "ar", {})
    diff, _, _ = run(tiny_fast, TorchBackend, "diffusion", {}, block_size=1)
    assert torch.equal(ar, diff)


@pytest.mark.parametrize("fixture", ["tiny_fast", "tiny_traj", "tiny_fast_bins"])
def test_speculative_equals_ar_greedy_and_stays_within_two_forwards_per_token(fixture, request):
    bundle = request.getfixturevalue(fixture)
    ar, ar_stats, _ = run(bundle, TorchBackend, "ar", {})
    spec, stats, _ = run(bundle, TorchBackend, "speculative", {})
    assert torch.equal(ar, spec)
    layout = layout_for(bundle, "speculative")
    editable = layout.editable_count()
    assert stats.forwards <= 1 + 2 * editable + len(layout.blocks)
    assert stats.tokens_decided == ar_stats.tokens_decided == editable


def test_every_redraft_equals_ar_and_action_redraft_is_causal_on_trajectory_blocks_only(tiny_fast):
    ar, _, _ = run(tiny_fast, TorchBackend, "ar", {})
    per_section = {}
    for redraft in ("diffusion", "causal", "action"):
        spec, stats, _ = run(tiny_fast, TorchBackend, "speculative", {"redraft": redraft})
        assert torch.equal(ar, spec), redraft
        per_section[redraft] = stats.forwards_per_section
    action = per_section["action"]
    assert action["trajectory"] == per_section["causal"]["trajectory"]
    for section in ("critical_objects", "explanation", "future_meta_behavior"):
        assert action[section] == per_section["diffusion"][section], section
    with pytest.raises(ValueError, match="redraft"):
        make_strategy("speculative", redraft="jacobi")


def test_speculative_needs_fewer_forwards_than_ar_once_drafts_agree():
    """Fit a tiny model to one fixed plan for a few steps: drafts then match AR and
    speculative decoding finishes blocks in about two forwards."""
    from ddrive_ros.runtime.torch_backend import images_to_input
    from ddrive_ros.scaffold.codec import Codec
    from ddrive_ros.training.losses import DualStreamLoss
    from ddrive_ros.plan import Plan

    bundle = build_random("tiny", "trajectory_only", seed=3)
    layout = layout_for(bundle, "speculative")
    codec = Codec(layout)
    wps = np.stack([np.linspace(4, 32, 8), np.linspace(0, 3, 8)], 1)
    enc = codec.encode(Plan("trajectory_only", wps, np.arange(1, 9) * 0.5))
    ids = torch.from_numpy(enc.ids)[None].repeat(4, 1)
    labelled = torch.from_numpy(enc.labelled)[None].repeat(4, 1)
    images, ego, bos, nav = inputs(bundle)
    loss_fn = DualStreamLoss(layout, bundle.config.prompt_len)
    opt = torch.optim.AdamW(bundle.model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    bundle.model.train()
    for _ in range(60):
        prompt = bundle.model.prompt_embeds(bundle.model.encode_images(images_to_input(images, torch.float32)).expand(4, -1, -1),
                                            ego.expand(4, -1), bos.expand(4), nav.expand(4))
        loss = loss_fn(bundle.model, prompt, ids, labelled, gen).total
        opt.zero_grad()
        loss.backward()
        opt.step()
    bundle.model.eval()
    ar, ar_stats, _ = run(bundle, TorchBackend, "ar", {})
    spec, stats, _ = run(bundle, TorchBackend, "speculative", {})
    assert torch.equal(ar, spec)
    assert torch.equal(spec[0], torch.from_numpy(enc.ids))  # it learned the plan
    assert stats.forwards < ar_stats.forwards / 3, (stats.forwards, ar_stats.forwards)


class _FirstStepOnly:
    """Runs S2D2 until the first step of the trajectory section, then stops the decode."""

    name = "s2d2-first-step"

    class Done(Exception):
        pass

    def __init__(self, inner, section):
        self.inner, self.section, self.result = inner, section, None

    def begin_block(self, ctx):
        self.inner.begin_block(ctx)

    def step(self, ctx):
        first_open = int(ctx.open[0].nonzero()[0])
        self.inner.step(ctx)
        if ctx.section == self.section:
            self.result = (ctx.x[:, first_open].clone(), first_open, ctx)
            raise self.Done()


def test_s2d2_sampling_preserves_the_ar_distribution(tiny_fast):
    """The first verified token of the trajectory (a digit: 10 values) is sampled with
    min(1, q/p) acceptance and residual resampling; over many forked rows its empirical
    distribution must match the AR distribution q."""
    import copy

    bundle, n = copy.deepcopy(tiny_fast), 3000
    with torch.no_grad():  # sharpen the random model's outputs so draft (p) and AR (q) distributions differ
        bundle.model.backbone.head.weight.mul_(12.0)
        bundle.model.backbone.action_head.weight.mul_(12.0)
    layout = layout_for(bundle, "s2d2")
    backend = TorchBackend(bundle.model, layout.window, max_rows=n)
    prompt = backend.prompt(*inputs(bundle))
    probe = _FirstStepOnly(S2D2(policy="always"), "trajectory")
    with pytest.raises(_FirstStepOnly.Done):
        decode(backend, layout, prompt, probe, DecodeOptions(rollouts=n, rollout_temperature=1.0, seed=11))
    tokens, pos, ctx = probe.result
    # AR distribution: a fresh causal forward on row 0 over the committed prefix (still in the
    # cache: the aborted block only overwrote its own window) and the scaffold before the position
    logits = backend.step(ctx.x[:1], ctx.start, ctx.valid, False, ctx.action)
    q = torch.softmax(logits[0, pos - 1].masked_fill(~ctx.allowed[pos], -1e9), -1)
    emp = torch.bincount(tokens, minlength=q.shape[0]).float() / n
    tv = 0.5 * (emp - q).abs().sum().item()
    assert tv < 0.06, f"TV(empirical, AR) = {tv:.3f}"
    # the draft distribution p (bidirectional forward, position still masked) differs from q, so it is
    # the accept/resample rule that brought the samples to q, not a draft that already matched it
    drafted = ctx.x[:1].clone()
    drafted[0, pos:ctx.valid] = torch.where(ctx.allowed[pos:ctx.valid].sum(-1) > 1, ctx.mask_id, drafted[0, pos:ctx.valid])
    p_logits = backend.step(drafted, ctx.start, ctx.valid, True, ctx.action)
    p = torch.softmax(p_logits[0, pos - 1].masked_fill(~ctx.allowed[pos], -1e9), -1)
    assert 0.5 * (p - q).abs().sum().item() > 2 * tv


@pytest.mark.parametrize("fixture", ["tiny_fast", "tiny_traj"])
def test_forwards_start_at_the_committed_prefix_with_the_same_tokens(fixture, request, monkeypatch):
    """On a dynamic-shape backend the loop's window is the block's own length (not the padded window) and
    forwards start one position before the first open or changed position of the block: fewer positions
    through the backbone and through the loop's softmax, the same tokens as whole-window forwards."""
    bundle = request.getfixturevalue(fixture)
    trimmed, s_trim, _ = run(bundle, TorchBackend, "speculative", {})
    monkeypatch.setattr(TorchBackend, "dynamic_windows", False)
    whole, s_whole, _ = run(bundle, TorchBackend, "speculative", {})
    assert torch.equal(trimmed, whole) and s_trim.forwards == s_whole.forwards
    assert s_trim.tokens_processed <= s_whole.tokens_processed
    if fixture == "tiny_fast":  # (the random trajectory_only model accepts its whole draft at once)
        assert s_trim.tokens_processed < 0.9 * s_whole.tokens_processed, (s_trim.tokens_processed, s_whole.tokens_processed)


def test_the_additive_allowed_bias_gives_the_masked_softmax_bit_for_bit():
    from ddrive_ros.decoding.sampling import allowed_bias, constrained_probs

    g = torch.Generator().manual_seed(3)
    logits = 8 * torch.randn(2, 7, 50, generator=g)
    allowed = torch.rand(7, 50, generator=g) > 0.6
    allowed[:, 0] = True
    for t in (0.0, 1.0, 0.7):
        masked, biased = constrained_probs(logits, allowed, t), constrained_probs(logits, allowed_bias(allowed), t)
        assert torch.equal(masked, biased)
        assert float(masked[:, ~allowed].max()) == 0.0  # disallowed tokens get no probability


def test_forked_rollouts_do_not_recompute_the_prefix_and_greedy_rollouts_equal_the_greedy_plan(tiny_fast):
    one, s1, _ = run(tiny_fast, TorchBackend, "speculative", {}, DecodeOptions(rollouts=1))
    four, s4, _ = run(tiny_fast, TorchBackend, "speculative", {}, DecodeOptions(rollouts=4, rollout_temperature=0.0), rows=4)
    assert all(torch.equal(row, one[0]) for row in four)
    _, s2, _ = run(tiny_fast, TorchBackend, "speculative", {}, DecodeOptions(rollouts=2, rollout_temperature=0.0), rows=2)
    traj_positions = s2.tokens_processed - s1.tokens_processed  # one more row over the trajectory forwards
    window = layout_for(tiny_fast, "speculative").window
    assert 0 < traj_positions <= s1.forwards_per_section["trajectory"] * window
    # only the trajectory forwards run 4 rows; the prompt and sections 1-3 are processed once
    assert s4.tokens_processed - s1.tokens_processed == 3 * traj_positions
    assert s4.forwards == s1.forwards == s2.forwards


def test_base_model_parameter_counts_are_in_range_and_one_forward_runs_on_cpu():
    bundle = build_random("base-0.8b", "trajectory_only")
    c = bundle.model.param_counts()
    assert 0.08e9 <= c["vision_params"] <= 0.12e9
    assert 0.65e9 <= c["backbone_params"] <= 0.75e9
    assert 0.75e9 <= c["total_params"] <= 0.85e9
    assert c["action_expert_params"] > 0
    layout = layout_for(bundle, "speculative")
    backend = TorchBackend(bundle.model, layout.window)
    prompt = backend.prompt(*inputs(bundle))
    carry = backend.prefill(prompt)
    logits = backend.step(torch.as_tensor(layout.template_ids[None, : layout.window]), bundle.config.prompt_len,
                          layout.window, True, True)
    assert carry.shape == (1, len(bundle.tokenizer)) and torch.isfinite(logits).all()


def test_bench_decoding_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "ddrive_ros.cli", "bench", "decoding", "--config", "tiny", "--plans", "5"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    for name in ("ar", "diffusion", "speculative", "s2d2"):
        assert f"\n{name}" in out.stdout
    assert "identical to AR" in out.stdout


def test_a_speculative_recorder_sees_every_greedy_verification(tiny_traj):
    """bench/speculative_trace.py reads the shipped decoder through `recorder`: one call per verification,
    whose accepted tokens add up to every editable token a verification decides, and nothing else changes."""
    layout = layout_for(tiny_traj, "speculative")
    backend = TorchBackend(tiny_traj.model, layout.window)
    plain = decode(backend, layout, backend.prompt(*inputs(tiny_traj)), make_strategy("speculative"))
    calls = []
    strategy = make_strategy("speculative")
    strategy.recorder = lambda ctx, drafted, span, ar_tokens, decided: calls.append(
        (drafted, int((decided & span).sum()), int(span.sum())))
    ids, stats = decode(backend, layout, backend.prompt(*inputs(tiny_traj)), strategy)
    assert torch.equal(ids, plain[0]) and stats.forwards == plain[1].forwards
    assert calls and calls[0][0] and not any(d for d, _, _ in calls[1:])  # the diffusion draft comes first only
    assert all(1 <= accepted <= span for _, accepted, span in calls)
    # the first editable position of trajectory_only's block is not the block's first, so verifications decide all
    assert sum(a for _, a, _ in calls) == int(layout.editable.sum())


def test_tree_verification_equals_ar_greedy_token_for_token(tiny_fast):
    """Several candidate rows per verification (decoding/tree.py): the kept row's tokens are AR's, with or
    without a draft from outside the model; a schema without bin tokens never branches. The shipped
    trajectory_only model: a random one accepts its whole draft at once and never branches."""
    from ddrive_ros.checkpoint import load

    tiny_traj = load("trajectory_only_tiny")
    ar, _, _ = run(tiny_traj, TorchBackend, "ar", {})
    plain, plain_stats, _ = run(tiny_traj, TorchBackend, "speculative", {})
    for rows, depth in ((2, 1), (8, 1), (16, 2)):
        spec, stats, _ = run(tiny_traj, TorchBackend, "speculative", {"tree": rows, "tree_depth": depth}, rows=rows)
        assert torch.equal(ar, spec), rows
        assert stats.tree_forwards > 0 and stats.tree_rows == rows * stats.tree_forwards  # the tree ran, `rows` rows each time
        assert stats.tokens_decided == plain_stats.tokens_decided
    # with a prior (here: the AR plan shifted by a few bins on every waypoint) the first verification branches too
    layout = layout_for(tiny_traj, "speculative")
    prior = ar[0].clone()
    bins = torch.as_tensor(layout.editable)
    prior[bins] = (prior[bins] + 3).clamp(max=int(prior[bins].max()))
    backend = TorchBackend(tiny_traj.model, layout.window, max_rows=8)
    ids, stats = decode(backend, layout, backend.prompt(*inputs(tiny_traj)), make_strategy("speculative", tree=8),
                        prior=prior)
    assert torch.equal(ids, ar) and stats.prior_blocks == 1 and stats.tree_rows > 0
    # the full schema spells numbers in digits: nothing to branch on, the same forwards as without the tree
    fast_plain, fast_stats, _ = run(tiny_fast, TorchBackend, "speculative", {})
    fast_tree, fast_tree_stats, _ = run(tiny_fast, TorchBackend, "speculative", {"tree": 8}, rows=8)
    assert torch.equal(fast_plain, fast_tree) and fast_tree_stats.forwards == fast_stats.forwards
    assert fast_tree_stats.tree_rows == 0
    for bad in (0, 1.5, -2):
        with pytest.raises(ValueError, match="tree"):
            make_strategy("speculative", tree=bad)
    with pytest.raises(ValueError, match="tree_depth"):
        make_strategy("speculative", tree=4, tree_depth=3)
    # the node's parameters: the tree goes to speculative only, with a reason otherwise
    from ddrive_ros.ros.model import decoder_knobs

    assert decoder_knobs("speculative", 0.9, 0, 64, 2) == {"tree": 64, "tree_depth": 2}
    assert decoder_knobs("speculative", 0.9, 0) == {}
    with pytest.raises(ValueError, match="tree_rows=4: only decoder speculative"):
        decoder_knobs("diffusion", 0.9, 0, 4)


def test_the_last_block_skips_its_commit_unless_reflection_reads_the_cache(tiny_traj):
    """Nothing reads the cache after the plan's last block: AR costs the prefill and one forward per
    token (trajectory_only's first token follows scaffold, so it takes a forward of its own, and the
    last token's commit is skipped); with reflection the last block is committed as before."""
    layout = layout_for(tiny_traj, "ar")
    _, stats, _ = run(tiny_traj, TorchBackend, "ar", {})
    assert stats.forwards == 1 + layout.editable_count()
    from ddrive_ros.decoding.reflect import AutoEdit

    backend = TorchBackend(tiny_traj.model, layout.window)
    prompt = backend.prompt(*inputs(tiny_traj))
    _, edited = decode(backend, layout, prompt, make_strategy("ar"), reflect=AutoEdit())
    assert edited.forwards - edited.reflect["forwards"] == stats.forwards + 1  # the commit reflection reads


def test_tree_bench_row_cost_and_plans_tables(tmp_path):
    """bench/tree_verification.py (also run by bench/gpu.sh with --rows-only on a GPU): both tables, and
    every tree plan equal to AR's."""
    import json

    out = tmp_path / "tree.json"
    png = tmp_path / "tree.png"
    run_ = subprocess.run([sys.executable, "bench/tree_verification.py", "--plans", "2", "--iters", "2", "--json", str(out),
                           "--plot", str(png)], capture_output=True, text=True, timeout=600)
    assert run_.returncode == 0, run_.stderr
    res = json.loads(out.read_text())
    assert [r["rows"] for r in res["row_cost"]] == [1, 2, 4, 8, 16, 32, 64]
    plans = {r["decoder"]: r for r in res["plans"]}
    assert all(r["token_mismatches_vs_ar"] == 0 for r in plans.values())
    assert plans["ar"]["forwards_per_plan"] == 17.0
    assert plans["ego-state draft, tree=16"]["rows_per_plan"] > plans["ego-state draft, tree=16"]["forwards_per_plan"]
    assert "| ego-state draft, tree=64x2 |" in run_.stdout
    assert png.stat().st_size > 10_000


def test_tree_bench_row_cost_of_a_random_config_on_both_backends_and_its_estimate(tmp_path):
    """--config prices random weights of a model config (base-0.8b on a GPU in bench/gpu.sh; tiny here), on eager and
    the CUDA-graph backend's static-buffer path; --estimate prices a saved plans table by that row cost: a K-row tree
    plan pays its K-row forwards at the K-row price, so with linear costs it costs its rows."""
    import json

    rows_json = tmp_path / "rows.json"
    run_ = subprocess.run([sys.executable, "bench/tree_verification.py", "--rows-only", "--config", "tiny", "--iters", "1",
                           "--backends", "eager,cuda_graph", "--json", str(rows_json)],
                          capture_output=True, text=True, timeout=300)
    assert run_.returncode == 0, run_.stderr
    res = json.loads(rows_json.read_text())
    assert res["config"] == "tiny" and set(res["row_cost_by_backend"]) == {"eager", "cuda_graph"}
    assert all([r["rows"] for r in rc] == [1, 2, 4, 8, 16, 32, 64] for rc in res["row_cost_by_backend"].values())
    linear = {"row_cost": [{"rows": k, "ms_per_step": float(k)} for k in (1, 2, 4, 8, 16, 32, 64)]}
    (tmp_path / "linear.json").write_text(json.dumps(linear))
    plans = {"plans": [{"decoder": "speculative, ego-state draft", "forwards_per_plan": 8.0, "rows_per_plan": 8.0},
                       {"decoder": "ego-state draft, tree=16", "forwards_per_plan": 6.0, "rows_per_plan": 66.0}]}
    (tmp_path / "plans.json").write_text(json.dumps(plans))
    out = tmp_path / "est.json"
    run_ = subprocess.run([sys.executable, "bench/tree_verification.py", "--estimate", str(tmp_path / "plans.json"),
                           str(tmp_path / "linear.json"), "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert run_.returncode == 0, run_.stderr
    est = {r["decoder"]: r for r in json.loads(out.read_text())["estimate"]}
    tree = est["ego-state draft, tree=16"]
    assert tree["k_row_forwards"] == 4.0 and tree["step_ms_per_plan"] == 66.0
    assert est["speculative, ego-state draft"]["step_ms_per_plan"] == 8.0 and tree["x_plain_speculative"] == 66.0 / 8.0
    assert run_.returncode == 0 and subprocess.run(
        [sys.executable, "bench/tree_verification.py", "--config", "tiny"], capture_output=True, text=True,
        timeout=60).returncode != 0  # random weights have no plans table


def test_a_trajectory_moved_after_the_prompt_decodes_cached_as_the_reference_and_is_really_moved():
    """ModelConfig.action_rope_shift: the trajectory's rotary positions start right after the prompt. The cached
    decoders and the explicit-mask reference must agree on it, and it must change what the same weights say."""
    from ddrive_ros.checkpoint import build_random
    from ddrive_ros.commands.train import set_action_rope_shift

    moved = build_random("tiny", "fast_ddrive_bins", seed=4, action_after_prompt=True)
    layout = layout_for(moved, "speculative")
    first = int(np.flatnonzero(np.asarray(layout.action))[0])
    assert moved.config.action_rope_shift == first > 200  # after the text: 273 positions into the template
    ids, _, logits = run(moved, TorchBackend, "speculative", {})
    ref_ids, _, ref_logits = run(moved, ReferenceBackend, "speculative", {})
    assert torch.equal(ids, ref_ids)
    assert max((a - b).abs().max().item() for a, b in zip(logits, ref_logits)) < 1e-4
    unmoved = build_random("tiny", "fast_ddrive_bins", seed=4)
    set_action_rope_shift(unmoved, 0)
    ids0, _, _ = run(unmoved, TorchBackend, "speculative", {})
    traj = torch.as_tensor(np.asarray(layout.action))
    assert torch.equal(ids[:, ~traj], ids0[:, ~traj])  # the text before the trajectory is untouched
    _, _, logits0 = run(unmoved, ReferenceBackend, "ar", {})
    _, _, logits1 = run(moved, ReferenceBackend, "ar", {})
    assert max((a - b).abs().max().item() for a, b in zip(logits0, logits1)) > 1e-3  # the trajectory's are not
