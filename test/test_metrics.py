"""Behaviour metrics that a constant guess cannot pass."""
from __future__ import annotations

import pytest

from ddrive_ros.evaluation.metrics import bootstrap_macro_f1_se, classification, f1, per_key_f1

CLASSES = ("STRAIGHT", "LEFT_TURN", "RIGHT_TURN", "LEFT_CHANGE", "RIGHT_CHANGE")


def test_always_straight_has_high_accuracy_and_low_macro_f1():
    truth = ["STRAIGHT"] * 80 + ["LEFT_TURN"] * 10 + ["RIGHT_TURN"] * 10
    rep = classification(["STRAIGHT"] * 100, truth, CLASSES)
    assert rep["accuracy"] == pytest.approx(0.8)
    # F1(STRAIGHT) = 2 * 0.8 * 1 / 1.8; the turns score 0; macro over the three classes seen
    assert rep["macro_f1"] == pytest.approx((2 * 0.8 / 1.8) / 3)
    assert rep["recall"] == {"STRAIGHT": 1.0, "LEFT_TURN": 0.0, "RIGHT_TURN": 0.0}
    assert rep["confusion"][0][0] == 80 and rep["confusion"][1][0] == 10 and sum(map(sum, rep["confusion"])) == 100


def test_a_perfect_answer_scores_one_and_unknown_labels_are_named():
    truth = ["STRAIGHT", "LEFT_CHANGE", "RIGHT_TURN"]
    assert classification(truth, truth, CLASSES)["macro_f1"] == 1.0
    with pytest.raises(ValueError, match="U_TURN"):
        classification(["U_TURN"], ["STRAIGHT"], CLASSES)


def test_f1_micro_and_per_key():
    truth = [{"a": True, "b": False}, {"a": True, "b": True}]
    pred = [{"a": True, "b": True}, {"a": False, "b": True}]
    assert f1(pred, truth) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert per_key_f1(pred, truth) == pytest.approx({"a": 2 / 3, "b": 2 / 3})


def test_macro_f1_standard_error_shrinks_with_the_sample_and_is_zero_for_a_perfect_answer():
    classes = ["STRAIGHT", "LEFT_TURN", "RIGHT_TURN"]
    # 200 samples, 11 turns, 4 of them missed and 3 straight samples called a turn: seed 777's situation
    truth = ["STRAIGHT"] * 189 + ["LEFT_TURN"] * 4 + ["RIGHT_TURN"] * 7
    pred = ["STRAIGHT"] * 186 + ["LEFT_TURN"] * 3 + ["LEFT_TURN"] * 3 + ["STRAIGHT"] + ["RIGHT_TURN"] * 4 + ["STRAIGHT"] * 3
    small = bootstrap_macro_f1_se(pred, truth, classes)
    large = bootstrap_macro_f1_se(pred * 20, truth * 20, classes)
    assert 0.03 < small < 0.12  # a few answers move a 200-sample macro-F1 by hundredths
    assert large < small / 3  # about sqrt(20) smaller
    assert bootstrap_macro_f1_se(truth, truth, classes) == 0.0
    assert bootstrap_macro_f1_se(pred, truth, classes) == small  # seeded
