"""Decode-time enum offsets (decoding/logit_bias.py): parsed and checked against the schema, read alike by
every decoder (speculative still equals AR), stored with a checkpoint, fitted by bench/meta_calibration.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from conftest import load_bench_script
from ddrive_ros import checkpoint as ckpt
from ddrive_ros.decoding import logit_bias
from ddrive_ros.decoding.block_loop import DecodeOptions, decode
from ddrive_ros.decoding.strategies import make_strategy
from ddrive_ros.observation import Observation
from ddrive_ros.planner import Planner, PlannerOptions
from ddrive_ros.runtime.torch_backend import TorchBackend
from ddrive_ros.scaffold.layout import Layout


def test_parse_takes_mappings_and_strings_and_names_what_is_wrong():
    want = {"lateral": {"LEFT_TURN": 2.0, "RIGHT_TURN": -1.0}}
    assert logit_bias.parse("lateral.LEFT_TURN=2, lateral.RIGHT_TURN=-1") == want
    assert logit_bias.parse(["lateral.LEFT_TURN=2", "lateral.RIGHT_TURN=-1"]) == want
    assert logit_bias.parse(want) == want
    assert logit_bias.parse("none") == logit_bias.parse("") == logit_bias.parse(None) == {}
    assert logit_bias.parse(logit_bias.to_strings(want)) == want
    for bad, msg in (("lateral=2", "field.VALUE=offset"), ("lateral.LEFT_TURN=two", "not a number"),
                     ("lateral.LEFT_TURN=nan", "not finite"), ({"lateral": 2.0}, "must map values")):
        with pytest.raises(ValueError, match=msg):
            logit_bias.parse(bad)


def test_entries_name_an_unknown_field_or_value(tiny_fast_bins):
    layout = Layout(tiny_fast_bins.schema, tiny_fast_bins.tokenizer)
    with pytest.raises(ValueError, match="no enum field 'heading'"):
        logit_bias.entries(layout, {"heading": {"LEFT": 1.0}})
    with pytest.raises(ValueError, match="lateral has no value 'FLY'"):
        logit_bias.entries(layout, {"lateral": {"FLY": 1.0}})
    (pos, tok, off), = logit_bias.entries(layout, {"lateral": {"LEFT_TURN": 1.5, "RIGHT_TURN": 0.0}})
    assert layout.slots[pos].group == "enum:lateral" and tok == layout.tokenizer.id("LEFT_TURN") and off == 1.5


def _decode(bundle, decoder, bias):
    layout = Layout(bundle.schema, bundle.tokenizer, 1 if decoder == "ar" else None)
    backend = TorchBackend(bundle.model, layout.window)
    g = torch.Generator().manual_seed(0)
    h, w = bundle.config.vision.image_size
    prompt = backend.prompt(torch.randint(0, 256, (1, 6, h, w, 3), generator=g, dtype=torch.uint8),
                            torch.randn(1, 11, generator=g), torch.tensor([bundle.tokenizer.bos_id]),
                            torch.tensor([bundle.tokenizer.id("<nav:FOLLOW_LANE>")]))
    ids, _ = decode(backend, layout, prompt, make_strategy(decoder),
                    DecodeOptions(logit_bias=logit_bias.entries(layout, bias)))
    return layout, ids[0]


def test_every_decoder_reads_the_offsets_so_speculative_still_equals_ar(tiny_fast_bins):
    layout, plain = _decode(tiny_fast_bins, "speculative", {})
    (pos, _, _), = logit_bias.entries(layout, {"lateral": {"LEFT_TURN": 1.0}})
    values = list(layout.slots[pos].allowed)
    chosen = values[(values.index(layout.tokenizer.token(int(plain[pos]))) + 1) % len(values)]
    for bias in ({}, {"lateral": {chosen: 30.0}}, {"lateral": {"LEFT_TURN": 0.7, "RIGHT_CHANGE": -0.4}}):
        _, ar = _decode(tiny_fast_bins, "ar", bias)
        _, spec = _decode(tiny_fast_bins, "speculative", bias)
        assert torch.equal(ar, spec), bias
    # a large offset decides the slot; everything decoded before the slot is untouched
    _, forced = _decode(tiny_fast_bins, "speculative", {"lateral": {chosen: 30.0}})
    assert layout.tokenizer.token(int(forced[pos])) == chosen != layout.tokenizer.token(int(plain[pos]))
    assert torch.equal(forced[:pos], plain[:pos])


OBS = dict(images=np.zeros((2, 3, 96, 160, 3), np.uint8), speed=5.0, accel=0.0, yaw_rate=0.0,
           past_xy=np.stack([np.linspace(-10, -2.5, 4), np.zeros(4)], 1))


def test_a_checkpoint_carries_its_calibration_and_options_override_it(tmp_path):
    bundle = ckpt.build_random("tiny", "fast_ddrive_bins", seed=3)
    path = ckpt.save(bundle, tmp_path / "ck")
    plain = Planner(ckpt.load(path)).plan(Observation(**OBS))
    forced = "RIGHT_CHANGE" if plain.meta.lateral != "RIGHT_CHANGE" else "LEFT_TURN"
    ckpt.write_calibration(path, {"logit_bias": {"lateral": {forced: 40.0}}, "fitted_by": "a test"})
    loaded = ckpt.load(path)
    assert loaded.calibration["logit_bias"] == {"lateral": {forced: 40.0}}
    planner = Planner(loaded)
    assert planner.logit_bias == {"lateral": {forced: 40.0}}
    assert planner.plan(Observation(**OBS)).meta.lateral == forced
    off = Planner(loaded, PlannerOptions(logit_bias={}))
    assert off.logit_bias == {} and off.plan(Observation(**OBS)).meta.lateral == plain.meta.lateral
    # new weights saved from a calibrated bundle do not inherit its fit
    assert ckpt.load(ckpt.save(loaded, tmp_path / "retrained")).calibration == {}


def test_a_bad_calibration_is_refused_naming_the_file_and_not_written(tmp_path):
    path = ckpt.save(ckpt.build_random("tiny", "fast_ddrive_bins", seed=3), tmp_path / "ck")
    before = (path / "config.yaml").read_text()
    with pytest.raises(ckpt.CheckpointError, match="config.yaml.*no value 'FLY'"):
        ckpt.write_calibration(path, {"logit_bias": {"lateral": {"FLY": 1.0}}})
    assert (path / "config.yaml").read_text() == before
    doc = yaml.safe_load(before)
    doc["calibration"] = {"logit_bias": {"lateral": {"LEFT_TURN": 1.0}}, "surprise": 1}
    (path / "config.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ckpt.CheckpointError, match="config.yaml: calibration must be a mapping"):
        ckpt.load(path)


def test_the_calibration_fit_finds_the_offset_an_under_called_class_needs():
    mc = load_bench_script("meta_calibration")
    rng = np.random.default_rng(0)
    values = ["STRAIGHT", "LEFT_TURN", "RIGHT_TURN"]
    labels = rng.choice(3, size=1200, p=[0.8, 0.1, 0.1])
    logp = rng.normal(0.0, 0.5, (1200, 3))
    logp[np.arange(1200), labels] += 2.0
    logp[:, 1] -= 2.5  # LEFT_TURN is answered far too seldom
    data = {"checkpoint": "x", "field": "lateral", "values": values, "seeds": [1, 2, 3, 4], "per_episode": 1,
            "labels": labels.tolist(), "logp": logp.tolist(), "seed_of": np.repeat([1, 2, 3, 4], 300).tolist(),
            "anchor": np.tile([0, 1, 2], 400).tolist()}
    res = mc.analyse(data, np.arange(-1.0, 3.01, 0.5))
    # the `ddrive eval` protocol's samples (each episode's first anchor) are reported seed by seed
    assert [r["n"] for r in res["per_seed"].values()] == [100] * 4
    assert res["rows"]["no offsets, first anchors"]["macro_f1"] < res["rows"]["fitted offsets, first anchors (in sample)"]["macro_f1"]
    assert res["offsets"]["STRAIGHT"] == 0.0 and res["offsets"]["LEFT_TURN"] >= 1.5
    assert res["rows"]["fitted offsets (in sample)"]["macro_f1"] > res["rows"]["no offsets"]["macro_f1"] + 0.1
    assert len(res["folds"]) == 6
    assert all(f["test_macro_f1_after"] > f["test_macro_f1_before"] for f in res["folds"])
    assert "LEFT_TURN" in mc.report(data, res) and res["errors_by"] == {}  # saved without scenario kinds
    # with each sample's scenario kind: STRAIGHT samples answered as a manoeuvre, counted where they happen
    kind = np.where(np.arange(1200) % 2 == 0, "curve", "straight")
    pred = logp.argmax(1)
    res = mc.analyse({**data, "kind": kind.tolist()}, np.arange(-1.0, 3.01, 0.5))
    assert set(res["errors_by"]) == {"kind"}
    curve = res["errors_by"]["kind"]["curve"]
    assert curve["n"] == 600 and curve["straight"] == int(np.sum((kind == "curve") & (labels == 0)))
    assert curve["straight_as_manoeuvre"] == int(np.sum((kind == "curve") & (labels == 0) & (pred != 0)))
    assert curve["manoeuvres_missed"] == int(np.sum((kind == "curve") & (labels != 0) & (pred != labels)))
    assert "| curve | 600 |" in mc.report(data, res)


def test_the_node_parameter_picks_the_checkpoints_calibration_none_or_a_spec(tmp_path):
    from ddrive_ros.ros.model import load_planner, logit_bias_option

    assert logit_bias_option("checkpoint") is None and logit_bias_option("none") == {}
    assert logit_bias_option("lateral.LEFT_TURN=2") == {"lateral": {"LEFT_TURN": 2.0}}
    with pytest.raises(ValueError, match="parameter logit_bias"):
        logit_bias_option("lateral.LEFT_TURN")
    path = ckpt.save(ckpt.build_random("tiny", "fast_ddrive_bins", seed=3), tmp_path / "ck")
    ckpt.write_calibration(path, {"logit_bias": {"lateral": {"LEFT_TURN": 1.5}}, "fitted_by": "a test"})
    planner, info = load_planner(str(path))
    assert planner.logit_bias == info["logit_bias"] == {"lateral": {"LEFT_TURN": 1.5}}
    assert load_planner(str(path), logit_bias="none")[0].logit_bias == {}
    assert load_planner(str(path), logit_bias="lateral.RIGHT_TURN=-1")[0].logit_bias == {"lateral": {"RIGHT_TURN": -1.0}}
    with pytest.raises(ValueError, match="no value 'FLY'"):
        load_planner(str(path), logit_bias="lateral.FLY=1")
    # ddrive sim --ros hands --logit-bias to the node as that parameter, and it reads back the same
    import argparse

    from ddrive_ros.commands.sim import node_logit_bias

    assert node_logit_bias(argparse.Namespace(logit_bias=None)) == "checkpoint"
    assert node_logit_bias(argparse.Namespace(logit_bias={})) == "none"
    spec = {"lateral": {"LEFT_TURN": 2.5, "RIGHT_TURN": -1.0}}
    assert logit_bias_option(node_logit_bias(argparse.Namespace(logit_bias=spec))) == spec
