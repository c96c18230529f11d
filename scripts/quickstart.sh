#!/usr/bin/env bash
# The README's first command: installs what gpupool needs, builds it, and runs the main job:
# the pool gpupool would manage on this machine (real GPUs when present, else simulated), and a
# MIG plan made by the same planner the pool uses.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
echo "== gpupool devices: the pool on this machine =="
./build/runtime/gpupool devices
echo
echo "== gpupool mig plan: one H100 split for three teams =="
./build/runtime/gpupool mig plan --model H100-80GB --profiles 3g.40gb,2g.20gb,1g.10gb,1g.10gb
