"""One home for plan-quality metrics: displacement errors (ADE, FDE, L2 at horizons), collisions
against other agents' futures, F1 of yes/no judgements, and the constant-velocity baseline that
every displacement metric is reported next to. numpy only: the evaluator, the replay tool and the
closed-loop simulator all score with these."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ddrive_ros.timeline import L2_HORIZONS_S
from ddrive_ros.trajectory import path_yaw_speed




def _errors(pred: ArrayLike, truth: ArrayLike, leading: int) -> np.ndarray:
    """Per-waypoint L2 errors (..., K) after checking shapes (leading = number of batch axes)."""
    p = np.asarray(pred, dtype=float)
    g = np.asarray(truth, dtype=float)
    if p.shape != g.shape or p.ndim != leading + 2 or p.shape[-1] != 2 or p.shape[-2] < 1:
        raise ValueError(f"pred and truth must both be {'(B, ' if leading else '('}K, 2), got {p.shape} and {g.shape}")
    return np.linalg.norm(p - g, axis=-1)


def _l2_at_errors(diff: np.ndarray, times: np.ndarray, at: Iterable[float]) -> np.ndarray:
    """L2 of linearly interpolated differences (..., K, 2) at each `at` -> (..., len(at)); NaN outside."""
    at_arr = np.asarray(list(at), dtype=float)
    k = diff.shape[-2]
    if times.shape != (k,) or np.any(np.diff(times) <= 0.0):
        raise ValueError(f"times must be ({k},) strictly increasing, got {times}")
    inside = (at_arr >= times[0]) & (at_arr <= times[-1])
    if k == 1:
        values = np.repeat(diff[..., :1, :], len(at_arr), axis=-2)
    else:
        # Interpolating the difference equals differencing the interpolants: both are linear.
        lo = np.clip(np.searchsorted(times, at_arr, side="right") - 1, 0, k - 2)
        w = ((at_arr - times[lo]) / (times[lo + 1] - times[lo]))[:, None]
        values = diff[..., lo, :] * (1.0 - w) + diff[..., lo + 1, :] * w
    return np.where(inside, np.linalg.norm(values, axis=-1), np.nan)


def ade(pred: ArrayLike, truth: ArrayLike) -> float:
    """Average displacement error of one (K, 2) trajectory, metres."""
    return float(_errors(pred, truth, 0).mean())


def fde(pred: ArrayLike, truth: ArrayLike) -> float:
    """Final displacement error of one (K, 2) trajectory, metres."""
    return float(_errors(pred, truth, 0)[-1])


def l2_at(
    pred: ArrayLike, truth: ArrayLike, times: ArrayLike, at: Iterable[float] = L2_HORIZONS_S
) -> dict[float, float]:
    """L2 distance at each horizon in `at` (seconds), interpolating linearly along `times`; NaN outside."""
    _errors(pred, truth, 0)
    at_list = [float(a) for a in at]
    diff = np.asarray(pred, dtype=float) - np.asarray(truth, dtype=float)
    values = _l2_at_errors(diff, np.asarray(times, dtype=float), at_list)
    return {a: float(v) for a, v in zip(at_list, values)}


@dataclass(frozen=True)
class TrajectoryMetrics:
    """Means over a batch of trajectories."""

    ade: float
    fde: float
    l2_at: dict[float, float]
    count: int


def batch_metrics(
    pred: ArrayLike, truth: ArrayLike, times: ArrayLike, at: Iterable[float] = L2_HORIZONS_S
) -> TrajectoryMetrics:
    """ADE, FDE and L2 at horizons for (B, K, 2) predictions, averaged over the batch."""
    errors = _errors(pred, truth, 1)
    at_list = [float(a) for a in at]
    diff = np.asarray(pred, dtype=float) - np.asarray(truth, dtype=float)
    at_errors = _l2_at_errors(diff, np.asarray(times, dtype=float), at_list)  # (B, len(at))
    means = at_errors.mean(axis=0) if len(errors) else np.full(len(at_list), np.nan)
    return TrajectoryMetrics(
        ade=float(errors.mean()) if errors.size else float("nan"),
        fde=float(errors[:, -1].mean()) if errors.size else float("nan"),
        l2_at={a: float(v) for a, v in zip(at_list, means)},
        count=int(errors.shape[0]),
    )


def constant_velocity_prediction(speed: float, yaw_rate: float, times: ArrayLike) -> np.ndarray:
    """Ego-frame positions (K, 2) at `times` holding speed and yaw rate (a circular arc, or a line).

    x = v sin(w t) / w, y = v (1 - cos(w t)) / w, written with sinc so that w -> 0 is the straight
    line x = v t without a branch or a division by zero.
    """
    t = np.asarray(times, dtype=float).reshape(-1)
    theta = float(yaw_rate) * t
    x = float(speed) * t * np.sinc(theta / np.pi)  # np.sinc(u) = sin(pi u) / (pi u)
    y = float(speed) * t * 0.5 * theta * np.sinc(theta / (2.0 * np.pi)) ** 2  # 1 - cos = 2 sin^2(theta / 2)
    return np.column_stack([x, y])


def displacement_summary(preds: Sequence[np.ndarray], truths: Sequence[np.ndarray], times: np.ndarray,
                         at: Iterable[float] = L2_HORIZONS_S) -> dict[str, float]:
    """Mean ADE, FDE and L2 at the horizons within `times` over many (K, 2) plans against their
    truths (the same K stamps `times`): {"ade", "fde", "l2_1s", ...}."""
    if not len(preds):
        return {}
    times = np.asarray(times, dtype=float)
    m = batch_metrics(np.stack(preds), np.stack(truths), times, [a for a in at if a <= times[-1] + 1e-9])
    out = {"ade": m.ade, "fde": m.fde}
    out.update({f"l2_{a:g}s": v for a, v in m.l2_at.items()})
    return out


def collides(plan_xy: np.ndarray, times: np.ndarray, start_speed: float, objects_xy: np.ndarray,
             objects_half_extents: np.ndarray, ego_half_extents: np.ndarray) -> bool:
    """Approximate overlap of the ego following `plan_xy` with other agents' futures (A, K, 2)
    at the same stamps: an object centre inside the ego footprint grown by the object's half
    width, the ego heading taken along the planned path."""
    if objects_xy.shape[0] == 0:
        return False
    yaw, _ = path_yaw_speed(plan_xy, times, 0.0, start_speed)
    d = objects_xy - plan_xy[None]  # (A, K, 2)
    c, s = np.cos(yaw)[None], np.sin(yaw)[None]
    lon = d[..., 0] * c + d[..., 1] * s
    lat = -d[..., 0] * s + d[..., 1] * c
    grow = objects_half_extents[:, 1][:, None]
    return bool(np.any((np.abs(lon) < ego_half_extents[0] + grow) & (np.abs(lat) < ego_half_extents[1] + grow)))


def f1(pred: Sequence[dict[str, bool]], truth: Sequence[dict[str, bool]]) -> float:
    """Micro F1 of yes/no judgements over every key of every truth dict."""
    tp = sum(p[k] and t[k] for p, t in zip(pred, truth) for k in t)
    fp = sum(p[k] and not t[k] for p, t in zip(pred, truth) for k in t)
    fn = sum((not p[k]) and t[k] for p, t in zip(pred, truth) for k in t)
    return 2 * tp / max(2 * tp + fp + fn, 1)


def macro_f1(confusion: np.ndarray) -> np.ndarray:
    """Macro-F1 of confusion matrices (..., K, K; rows truth, columns prediction): per class
    2 TP / (support + predicted), averaged over the classes present in truth or prediction (0 for none)."""
    confusion = np.asarray(confusion)
    tp = np.diagonal(confusion, axis1=-2, axis2=-1).astype(float)
    denom = confusion.sum(-1) + confusion.sum(-2)
    seen = denom > 0
    f1s = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=seen)
    return np.divide(f1s.sum(-1), seen.sum(-1), out=np.zeros(f1s.shape[:-1]), where=seen.any(-1))


def bootstrap_macro_f1_se(pred: Sequence[str], truth: Sequence[str], classes: Sequence[str], n: int = 1000,
                          seed: int = 0) -> float:
    """Standard error of `classification(...)["macro_f1"]`: the spread of macro-F1 over `n` resamples (with
    replacement, seeded) of the (prediction, truth) pairs. With rare classes, as the lateral meta has (about 11
    turns in 200 samples), one answer more or less moves macro-F1 by hundredths; this says how far a score holds."""
    if not len(truth):
        return 0.0
    index = {c: i for i, c in enumerate(classes)}
    k = len(classes)
    cell = np.array([index[t] * k + index[p] for p, t in zip(pred, truth)])
    picks = cell[np.random.default_rng(seed).integers(0, len(cell), (n, len(cell)))]
    offsets = np.arange(n)[:, None] * k * k
    confusions = np.bincount((picks + offsets).ravel(), minlength=n * k * k).reshape(n, k, k)
    return float(macro_f1(confusions).std(ddof=1))


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / max / n of a latency series (empty dict for none)."""
    if not len(values):
        return {}
    a = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p90": round(float(np.percentile(a, 90)), 2),
            "p99": round(float(np.percentile(a, 99)), 2), "max": round(float(a.max()), 2), "n": int(a.size)}


def classification(pred: Sequence[str], truth: Sequence[str], classes: Sequence[str]) -> dict:
    """Accuracy, macro-F1 over the classes present in truth or prediction, per-class precision,
    recall and F1, and the confusion matrix (rows truth, columns prediction, in `classes` order).
    Macro-F1 is what a constant answer cannot pass: always-STRAIGHT scores high accuracy and a
    macro-F1 near 1 / (number of classes)."""
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted({c for c in (*pred, *truth) if c not in index})
    if unknown:
        raise ValueError(f"labels {unknown} are not among the classes {list(classes)}")
    confusion = np.zeros((len(classes), len(classes)), dtype=int)
    for p, t in zip(pred, truth):
        confusion[index[t], index[p]] += 1
    tp = np.diag(confusion).astype(float)
    support, predicted = confusion.sum(1), confusion.sum(0)
    recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
    precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    f1s = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(tp), where=precision + recall > 0)
    seen = (support > 0) | (predicted > 0)
    return {
        "accuracy": float(tp.sum() / max(len(truth), 1)),
        "macro_f1": float(macro_f1(confusion)),
        "recall": {c: float(recall[i]) for i, c in enumerate(classes) if support[i] > 0},
        "precision": {c: float(precision[i]) for i, c in enumerate(classes) if predicted[i] > 0},
        "f1": {c: float(f1s[i]) for i, c in enumerate(classes) if seen[i]},
        "support": {c: int(support[i]) for i, c in enumerate(classes) if support[i] > 0},
        "confusion": confusion.tolist(),
        "classes": list(classes),
    }


def per_key_f1(pred: Sequence[dict[str, bool]], truth: Sequence[dict[str, bool]]) -> dict[str, float]:
    """F1 of each yes/no judgement (critical object) separately."""
    keys = list(truth[0]) if truth else []
    return {k: f1([{k: p[k]} for p in pred], [{k: t[k]} for t in truth]) for k in keys}
