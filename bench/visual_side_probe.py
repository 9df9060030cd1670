"""Do a model's visual tokens carry which way the road bends at a curve's start? A linear probe.

The full model's trajectory does not bend at curve starts while trajectory_only's does, to the right side
(`bench/curve_probe.py`). This asks whether the side is in the vision encoder's output at all: the visual
tokens of the curve starts of training seeds (1, 2) fit a ridge classifier for the sign of the expert's
lateral offset at the horizon's end; it is scored on the curve starts of the validation seed (31). If the
full model's tokens predict the side about as well as trajectory_only's, what is missing is the backbone
reading them, not the encoder seeing the bend (docs/training.md, "why y = 0 at curves").

    .venv/bin/python bench/visual_side_probe.py --checkpoints fast_ddrive_tiny,trajectory_only_tiny \
        --json bench/results/visual_side_probe.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from curve_probe import curve_starts  # noqa: E402

from ddrive_ros import checkpoint as ckpt  # noqa: E402
from ddrive_ros.planner import Planner, PlannerOptions  # noqa: E402
from ddrive_ros.runtime.torch_backend import images_to_input  # noqa: E402

LAMBDAS = (1.0, 10.0, 100.0, 1000.0, 10000.0)


def visual_tokens(planner: Planner, samples: list, desc: str) -> np.ndarray:
    model = planner.bundle.model
    out = []
    with torch.no_grad():
        for s in tqdm(samples, desc=desc, unit="sample", leave=False):
            images = images_to_input(planner._images(s.observation.images), torch.float32)
            out.append(model.vision(images)[0].numpy().reshape(-1))
    return np.array(out)


def ridge_accuracy(x_fit: np.ndarray, y_fit: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, lam: float) -> float:
    """Kernel-form ridge regression on +-1 labels (fewer samples than features), sign as the class."""
    alpha = np.linalg.solve(x_fit @ x_fit.T + lam * np.eye(len(x_fit)), y_fit)
    return float(np.mean(np.sign(x_test @ (x_fit.T @ alpha)) == y_test))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoints", default="fast_ddrive_tiny,trajectory_only_tiny")
    ap.add_argument("--fit-seeds", default="1,2", help="episode seeds whose curve starts fit the probe")
    ap.add_argument("--fit-episodes", type=int, default=120, help="episodes per fit seed")
    ap.add_argument("--seed", type=int, default=31, help="episode seed the probe is scored on (validation)")
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    fit = [s for seed in args.fit_seeds.split(",") for s in curve_starts(int(seed), args.fit_episodes)]
    test = curve_starts(args.seed, args.episodes)
    y_fit = np.array([np.sign(s.future_xy[-1, 1]) for s in fit])
    y_test = np.array([np.sign(s.future_xy[-1, 1]) for s in test])
    majority = float(max(np.mean(y_test > 0), np.mean(y_test < 0)))
    rows = []
    for name in args.checkpoints.split(","):
        planner = Planner(ckpt.load(name), PlannerOptions())
        x_fit, x_test = visual_tokens(planner, fit, f"{name} fit"), visual_tokens(planner, test, f"{name} test")
        mu, sd = x_fit.mean(0), x_fit.std(0) + 1e-6
        x_fit, x_test = (x_fit - mu) / sd, (x_test - mu) / sd
        acc = {str(lam): ridge_accuracy(x_fit, y_fit, x_test, y_test, lam) for lam in LAMBDAS}
        rows.append({"checkpoint": name, "features": int(x_fit.shape[1]), "test_accuracy_by_lambda": acc,
                     "best_test_accuracy": max(acc.values())})
    out = {"command": " ".join(["python bench/visual_side_probe.py", *sys.argv[1:]]),
           "fit_samples": len(fit), "test_samples": len(test), "test_majority_side": majority, "rows": rows}
    print(f"curve starts: {len(fit)} to fit (seeds {args.fit_seeds}), {len(test)} to test (seed {args.seed}); "
          f"the more common side alone scores {majority:.2f}")
    print("| checkpoint | " + " | ".join(f"lambda {lam:g}" for lam in LAMBDAS) + " |")
    print("|---|" + "---|" * len(LAMBDAS))
    for r in rows:
        print(f"| {r['checkpoint']} | " + " | ".join(f"{v:.2f}" for v in r["test_accuracy_by_lambda"].values()) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
