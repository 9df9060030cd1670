"""Output schemas: section counts, block alignment, CLI output, tokenizer file round trip."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from ddrive_ros.scaffold.layout import Layout
from ddrive_ros.scaffold.schema import Schema
from ddrive_ros.scaffold.tokenizer import Tokenizer


def counts(name, bs=None):
    return [(r["name"], r["editable"], r["blocks"]) for r in Schema.load(name).summary(bs)]


def test_fast_ddrive_has_fast_ddrive_section_counts():
    assert counts("fast_ddrive") == [("critical_objects", 12, 1), ("explanation", 192, 6),
                                     ("future_meta_behavior", 6, 1), ("trajectory", 70, 3)]


def test_trajectory_only_is_sixteen_tokens_in_one_block():
    assert counts("trajectory_only") == [("trajectory", 16, 1)]


def test_fast_ddrive_bins_is_fast_ddrive_with_one_bin_token_per_coordinate():
    assert counts("fast_ddrive_bins") == [("critical_objects", 12, 1), ("explanation", 192, 6),
                                          ("future_meta_behavior", 6, 1), ("trajectory", 20, 1)]
    bins, digits, traj = (Schema.load(n) for n in ("fast_ddrive_bins", "fast_ddrive", "trajectory_only"))
    assert [s.name for s in bins.sections] == [s.name for s in digits.sections]
    assert bins.sections[:3] == digits.sections[:3]  # only the trajectory differs
    wb, wt = bins.waypoint_field(), traj.waypoint_field()
    assert (wb.count, wb.dt) == (10, 0.5)  # fast_ddrive's horizon ...
    assert (wb.x, wb.y) == (wt.x, wt.y)  # ... in trajectory_only's bins, so its weights transfer token for token
    tb, tt = Tokenizer.build(bins), Tokenizer.build(traj)
    assert {t for t in tt.tokens if t.startswith("<bin_")} <= set(tb.tokens)


@pytest.mark.parametrize("bs", [1, 8, 16, 32])
def test_block_counts_follow_ceil_per_section_and_blocks_never_cross_sections(bs):
    schema = Schema.load("fast_ddrive")
    layout = Layout(schema, Tokenizer.build(schema), bs)
    for si, row in enumerate(schema.summary(bs)):
        assert row["blocks"] == math.ceil(row["editable"] / bs)
        assert len(layout.section_blocks(si)) == row["blocks"]
    for b in layout.blocks:
        assert len(set(layout.section[b.start:b.end])) == 1
        assert 1 <= layout.editable[b.start:b.end].sum() <= bs
    # blocks tile the whole template with no gap or overlap
    assert layout.blocks[0].start == 0 and layout.blocks[-1].end == layout.length
    assert all(a.end == b.start for a, b in zip(layout.blocks, layout.blocks[1:]))


def test_section_weights_and_noise_follow_reference():
    s = {sec.name: sec for sec in Schema.load("fast_ddrive").sections}
    assert {k: v.loss_weight for k, v in s.items()} == {"critical_objects": 1.5, "explanation": 1.0,
                                                        "future_meta_behavior": 2.0, "trajectory": 3.0}
    assert s["trajectory"].noise_beta == (2.0, 1.0) and s["future_meta_behavior"].noise_beta == (1.0, 1.5)
    assert s["critical_objects"].noise_beta == (1.0, 2.0) and s["explanation"].noise_beta == (1.0, 1.0)


def test_scaffold_positions_hold_fixed_tokens_and_editable_positions_are_masked():
    schema = Schema.load("fast_ddrive")
    tok = Tokenizer.build(schema)
    layout = Layout(schema, tok, 32)
    assert np.all(layout.template_ids[layout.editable] == tok.mask_id)
    assert not np.any(layout.template_ids[~layout.editable] == tok.mask_id)
    assert layout.action.sum() == layout.length - schema.section_spans()[-1][0]


def test_schema_cli_prints_json_sections():
    out = subprocess.run([sys.executable, "-m", "ddrive_ros.cli", "schema", "--schema", "fast_ddrive", "--json"],
                         capture_output=True, text=True, check=True).stdout
    sections = json.loads(out)["sections"]
    assert [s["editable"] for s in sections] == [12, 192, 6, 70]
    assert [s["blocks"] for s in sections] == [1, 6, 1, 3]
    assert all(s["scaffold"] > 0 for s in sections)
    out = subprocess.run([sys.executable, "-m", "ddrive_ros.cli", "schema", "--schema", "fast_ddrive", "--block-size", "8", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert [s["blocks"] for s in json.loads(out)["sections"]] == [2, 24, 1, 9]


def test_unknown_schema_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="known schemas"):
        Schema.load("no_such_schema")


def test_tokenizer_round_trips_through_its_json_file(tmp_path):
    schema = Schema.load("fast_ddrive")
    tok = Tokenizer.build(schema)
    tok.save(tmp_path / "tokenizer.json")
    again = Tokenizer.load(tmp_path / "tokenizer.json")
    assert again.tokens == tok.tokens and again.mask_id == tok.mask_id
    for special in ("<pad>", "<mask>", "<bos>", "<eos>", "<img>", "<expad>"):
        assert again.has(special)


def test_tokenizer_rejects_a_foreign_file(tmp_path):
    (tmp_path / "t.json").write_text('{"tokens": ["a"]}')
    with pytest.raises(ValueError, match="unknown format"):
        Tokenizer.load(tmp_path / "t.json")
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Tokenizer.load(tmp_path / "bad.json")
