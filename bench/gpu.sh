#!/usr/bin/env bash
# GPU runtime benchmark on a bare CUDA machine (Python 3, torch, numpy, pyyaml; no ROS, no venv):
#   bench/gpu.sh [--compile]     -> bench/results/gpu_h200.json + a markdown table on stdout (2.5 min on one H200;
#                                   --compile adds torch.compile, which ran past 6 min there),
#                                   then the tree-verification row cost, eager and CUDA graphs:
#                                   the shipped trajectory_only_tiny -> bench/results/tree_rows_h200.json (< 1 min),
#                                   a random-weight base-0.8b (bf16)  -> bench/results/tree_rows_base08b_h200.json (< 1 min)
#   bench/gpu.sh --dry-run       -> the same code paths on the CPU with the tiny config
# Each stage runs even when an earlier one failed; the script exits non-zero if any did.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
cd "${ROOT}"
PY="${PYTHON:-python3}"
failed=0
stage() {  # stage NAME CMD...: run, time, and remember a failure without stopping the others
  local name="$1"; shift
  local t0=$SECONDS
  echo "== ${name}"
  "$@" || { echo "!! ${name} failed (rc $?)"; failed=1; }
  echo "== ${name}: $((SECONDS - t0)) s"
}
"${PY}" -c "import platform, torch; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
stage "runtime benchmark" "${PY}" bench/gpu_bench.py "$@"
if [[ " $* " == *" --dry-run "* ]]; then
  stage "tree rows, trajectory_only_tiny" "${PY}" bench/tree_verification.py --rows-only --device cpu --iters 5 \
    --backends eager,cuda_graph --json bench/results/tree_rows_dryrun.json
  stage "tree rows, random tiny config" "${PY}" bench/tree_verification.py --rows-only --device cpu --iters 3 \
    --config tiny --backends eager,cuda_graph --json bench/results/tree_rows_config_dryrun.json
else
  stage "tree rows, trajectory_only_tiny" "${PY}" bench/tree_verification.py --rows-only --device cuda --iters 200 \
    --backends eager,cuda_graph --json bench/results/tree_rows_h200.json
  stage "tree rows, random base-0.8b" "${PY}" bench/tree_verification.py --rows-only --device cuda --iters 100 \
    --config base-0.8b --backends eager,cuda_graph --json bench/results/tree_rows_base08b_h200.json
fi
exit "${failed}"
