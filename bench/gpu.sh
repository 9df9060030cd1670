#!/usr/bin/env bash
# GPU runtime benchmark on a bare CUDA machine (Python 3, torch, numpy, pyyaml; no ROS, no venv):
#   bench/gpu.sh                 -> bench/results/gpu_h200.json + a markdown table on stdout (< 5 min on one H200)
#   bench/gpu.sh --dry-run       -> the same code path on the CPU with the tiny config
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
cd "${ROOT}"
exec "${PYTHON:-python3}" bench/gpu_bench.py "$@"
