#!/usr/bin/env bash
# The hyper-parameter sweep example, with real processes on loopback: a `gpupool head` over two
# nodes of two simulated GPUs, an agent per node, and the sweep's driver on node-0. Its 15 one-GPU
# trials must run on both nodes (node-1's in the worker its agent started), every trial's loss must
# be the one the same sweep computes with every trial in the driver's process (GPUPOOL_LOCAL_ONLY),
# and the best trial must be the expected one. (Each trial computes for about 0.3 s, so node-0's two
# GPUs take 2 s or more for all 15; node-1's worker starts in a fraction of that.)
#   hparam_sweep.sh GPUPOOL_CLI SWEEP_BINARY
set -euo pipefail
cli=$1
sweep=$2
source "$(dirname "$0")/two_node_pool.sh"

run() {
  env GPUPOOL_ADDRESS="127.0.0.1:$port" GPUPOOL_TOKEN=$team_token GPUPOOL_NODE=node-0 "$@" \
    timeout 90 "$sweep" 2>&1
}
out=$(run) || { echo "$out"; fail "the sweep's driver exited with an error"; }
echo "$out"
trials=$(echo "$out" | grep -Ec '^[0-9]+ +[0-9.e-]+ +[0-9]+ +node-[01]/GPU [01] ') || true
(( trials == 15 )) || fail "expected 15 trial rows (trial, lr, batch, node-N/GPU i, loss), found $trials"
for n in 0 1; do
  echo "$out" | grep -Eq "^[0-9]+ .* node-$n/GPU " || fail "no trial ran on node-$n"
done
echo "$out" | grep -q '^15 trials on 2 nodes; ' || fail "the driver did not report 15 trials on 2 nodes"

# Where a trial ran must change nothing: the same sweep with every trial in the driver's process.
local_out=$(run GPUPOOL_LOCAL_ONLY=1) || { echo "$local_out"; fail "the local-only sweep exited with an error"; }
columns() { echo "$1" | awk '/^[0-9]+ / { print $1, $2, $3, $6 }'; }
if [[ "$(columns "$out")" != "$(columns "$local_out")" ]]; then
  diff <(columns "$out") <(columns "$local_out") || true
  fail "trials on both nodes computed other losses than the same trials in the driver's process (diff above: <, >)"
fi
echo "$local_out" | grep -q '^15 trials on 1 node; ' || fail "GPUPOOL_LOCAL_ONLY=1 still ran trials on another node"

# The expected best: the small step with the small batch (lr 0.01, batch 8) on this synthetic data.
expected='best: trial 0, lr 0.01, batch 8, validation MSE 0.010014'
echo "$out" | grep -qF "$expected" || fail "the best trial is not the expected one ($expected)"
echo PASS
