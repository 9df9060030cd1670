#!/usr/bin/env bash
# GPU runtime benchmark on a bare CUDA machine (Python 3, torch, numpy, pyyaml; no ROS, no venv):
#   bench/gpu.sh                 -> bench/results/gpu_h200.json + a markdown table on stdout (< 5 min on one H200),
#                                   then the tree-verification row cost -> bench/results/tree_rows_h200.json (< 1 min)
#   bench/gpu.sh --dry-run       -> the same code paths on the CPU with the tiny config
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
cd "${ROOT}"
PY="${PYTHON:-python3}"
"${PY}" bench/gpu_bench.py "$@"
if [[ " $* " == *" --dry-run "* ]]; then
  "${PY}" bench/tree_verification.py --rows-only --device cpu --iters 5 --json bench/results/tree_rows_dryrun.json
else
  "${PY}" bench/tree_verification.py --rows-only --device cuda --iters 200 --json bench/results/tree_rows_h200.json
fi
