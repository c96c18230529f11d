#!/usr/bin/env bash
# The README's first command: installs what gpupool needs, builds it, shows the pool gpupool would
# manage on this machine (real GPUs when present, else simulated), and runs the main job:
# `gpupool demo`, three teams sharing the embedded pool.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
echo "== gpupool devices: the pool on this machine =="
./build/runtime/gpupool devices
echo
echo "== gpupool demo: three teams share the pool (pool clock runs 1800x) =="
./build/runtime/gpupool demo
