#!/usr/bin/env bash
# Tasks anywhere, with real processes on loopback: a `gpupool head` over two nodes of two simulated
# GPUs, an agent per node, and a driver on node-0 that submits four one-GPU tasks of a second
# each. All four must run at once, on both nodes (node-1's in a worker its agent started), and no
# worker of the job may outlive the driver.
#   tasks_anywhere.sh GPUPOOL_CLI DRIVER_BINARY
set -euo pipefail
cli=$1
driver=$2
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

printf 'default: team-secret-0123456789\nagents: agent-secret-0123456789\n' > "$dir/tokens"
echo agent-secret-0123456789 > "$dir/agent-token"
"$cli" head --simulate 2xH100-80GB --node-count 2 --tokens "$dir/tokens" --listen 127.0.0.1:0 \
  --port-file "$dir/port" > "$dir/head.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
port=$(cat "$dir/port")
for n in 0 1; do
  "$cli" agent --head "127.0.0.1:$port" --node "node-$n" --simulate 2xH100-80GB --token-file "$dir/agent-token" \
    --allow-root-workers > "$dir/agent-$n.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do
  (( $(grep -l registered "$dir"/agent-*.log 2>/dev/null | wc -l) == 2 )) && break
  sleep 0.1
done

out=$(GPUPOOL_ADDRESS="127.0.0.1:$port" GPUPOOL_TOKEN=team-secret-0123456789 GPUPOOL_NODE=node-0 \
      timeout 60 "$driver" 4 1.0 2>&1) || { echo "$out"; cat "$dir"/*.log; exit 1; }
echo "$out"
# Four tasks of 1 s on 4 GPUs: together well under the 2 s that two at a time would take.
echo "$out" | grep -Eq '4 tasks of 1.0 s on 2 nodes in 2 processes took (1\.[0-9]+|0\.[0-9]+) s' \
  || { echo "FAIL: the four tasks did not run at once on both nodes"; exit 1; }
# The worker's own output reached the driver, prefixed with the job, node and pid.
echo "$out" | grep -Eq '^\(job-[^ ]+ node-1 pid=[0-9]+\) task [0-9]+ running on node-1/GPU' \
  || { echo "FAIL: the worker's output did not reach the driver"; exit 1; }
job=$(echo "$out" | grep -Eo '^\(job-[^ ]+' | head -1 | tr -d '(')
# The driver has gone: within 2 s so has every worker of its job.
for _ in $(seq 20); do pgrep -f -- "--gpupool-worker-job=$job" > /dev/null || break; sleep 0.1; done
if pgrep -af -- "--gpupool-worker-job=$job"; then echo "FAIL: a worker of $job outlived its driver"; exit 1; fi
echo "PASS"
