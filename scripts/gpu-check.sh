#!/usr/bin/env bash
# Runs on a lent GPU machine, over the bundle scripts/gpu-bundle.sh built (carry .device/gpu):
# every GPU path of gpupool, each step timed out on its own so one failure does not stop the rest.
#   1. nvidia-smi -q beside `gpupool devices --driver nvidia` (model, memory, NVLink, MIG mode,
#      health fields) and `gpupool version`
#   2. a head and a real-GPU agent: registration, XID event registration as the driver allows,
#      the agent's device metrics (dcgm-exporter names), a real diagnostic under its own lease,
#      and a driver's tasks run in a worker the agent starts on the real GPU
#   3. the real-GPU tests (NCCL through TaskContext, gang allreduce, budgets, scrubbing, a
#      preempted task's device state resumed bit-identical) and the device-memory tests
#   4. bench/run gpu's measurements (gpu_bench)
#   5. the demo on the embedded pool over the real GPU
# Writes $OUT (or ./gpu-check-out): gpu-check.log (everything), nvidia-smi-q.txt, devices.txt,
# bench.txt; prints a summary. Never changes the GPU's settings (read only: no MIG mode change,
# no reset, no clocks).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/.device/gpu
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
: > "$LOG"
[ -x "$B/bin/gpupool" ] || { echo "no bundle in $B: run scripts/gpu-bundle.sh first (and carry .device/gpu)"; exit 1; }
# NCCL: the machine's own (the nvidia-nccl-cu13 wheel beside PyTorch), else any libnccl.so.2.
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
if [ ! -e "$nccl/libnccl.so.2" ]; then
  found=$(find /opt /usr -path '*cu12*' -prune -o -name 'libnccl.so.2*' -print 2>/dev/null | head -n 1)
  nccl=${found:+$(dirname "$found")}
fi
[ -n "$nccl" ] || echo "no libnccl.so.2 found on this machine: the NCCL steps will fail" | tee -a "$LOG"
export LD_LIBRARY_PATH="$B/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR=$B/lib/ucx
export CUDA_DEVICE_ORDER=PCI_BUS_ID
G=$B/bin/gpupool
summary=()
failed=0
step() {  # step NAME TIMEOUT_S COMMAND...: runs it, logs it, keeps its outcome for the summary
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "===== $name: $*" >> "$LOG"
  timeout -k 5 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "===== $name: exit $rc after $((SECONDS - t0)) s" >> "$LOG"
  summary+=("$(printf '%-28s exit %-3s %4s s' "$name" "$rc" "$((SECONDS - t0))")")
  [ "$rc" = 0 ] || failed=$((failed + 1))
  return $rc
}
{
  echo "host: $(uname -a)"; echo "nccl from: ${nccl:-nowhere}"
  ldd "$G" "$B/bin/real_gpu_test" "$B/bin/gpu_bench" | grep -E "not found|nccl|cudart" | sort -u
} >> "$LOG" 2>&1

# 1. The driver as NVIDIA's tools and as gpupool read it.
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
step nvidia-smi 30 nvidia-smi
step nvidia-smi-topo 30 nvidia-smi topo -m
step version 60 "$G" version
step devices 60 bash -o pipefail -c "'$G' devices --driver nvidia | tee '$OUT/devices.txt' && '$G' devices --driver nvidia --json >> '$OUT/devices.txt'"
model=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["nodes"][0]["gpus"][0]["model"])' \
        <(sed -n '/^{/,$p' "$OUT/devices.txt") 2>/dev/null)
count=$(nvidia-smi -L | grep -c '^GPU')
echo "catalogue model: ${model:-unknown}, $count GPU(s)" >> "$LOG"

# 2. A head and an agent on the real GPU: registration, XID events, device metrics, a diagnostic.
tmp=$(mktemp -d)
head_pid=; agent_pid=
cleanup() { kill $agent_pid $head_pid 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
printf 'vision: vision-token-0123456789\nagents: agent-token-0123456789\noperators: operators-token-0123456789\n' > "$tmp/tokens"
echo agent-token-0123456789 > "$tmp/agent.token"
"$G" head --simulate "${count}x${model:-H100-80GB}" --node-count 1 --tokens "$tmp/tokens" --listen 127.0.0.1:0 \
  --port-file "$tmp/port" --journal "$tmp/head.db" > "$tmp/head.log" 2>&1 &
head_pid=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port" 2>/dev/null)
[ -n "$port" ] || { echo "the head did not start:"; cat "$tmp/head.log"; } >> "$LOG"
"$G" agent --head "127.0.0.1:$port" --node node-0 --token-file "$tmp/agent.token" --http-listen 127.0.0.1:0 \
  --http-port-file "$tmp/http" --diagnose-every 5 --allow-root-workers > "$tmp/agent.log" 2>&1 &
agent_pid=$!
sleep 25
step status 30 env GPUPOOL_TOKEN=operators-token-0123456789 "$G" status --pool "127.0.0.1:$port"
step status-reasons 30 env GPUPOOL_TOKEN=operators-token-0123456789 "$G" status --pool "127.0.0.1:$port" --reasons
step usage-by-workload 30 env GPUPOOL_TOKEN=operators-token-0123456789 "$G" usage --pool "127.0.0.1:$port" --by workload
step agent-metrics 30 python3 -c "import urllib.request,sys; t=urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(); print('\\n'.join([l for l in t.splitlines() if not l.startswith('#')][:60]))" "http://127.0.0.1:$(cat "$tmp/http" 2>/dev/null)/metrics"
# A driver on a host with no GPUs of the pool: its tasks run in a worker the agent starts on the
# real GPU's node (the example re-executed with --gpupool-worker), with the NVIDIA driver there.
step tasks-anywhere 60 bash -o pipefail -c "GPUPOOL_ADDRESS=127.0.0.1:$port GPUPOOL_TOKEN=vision-token-0123456789 \
  GPUPOOL_TEAM=vision GPUPOOL_NODE=driver-host '$B/bin/tasks_anywhere' 2 | tee '$tmp/anywhere.txt' && \
  grep -Eq '^\\(job-[^ ]+ node-0 pid=[0-9]+\\) task [0-9]+ running on node-0/GPU' '$tmp/anywhere.txt'"
kill "$agent_pid" "$head_pid" 2>/dev/null; wait "$agent_pid" "$head_pid" 2>/dev/null
{ echo "----- head.log"; tail -n 60 "$tmp/head.log"; echo "----- agent.log"; tail -n 80 "$tmp/agent.log"; } >> "$LOG"

# 3. The real-GPU tests and the device-memory tests.
step real-gpu-tests 90 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$B/bin/real_gpu_test"
step device-memory-tests 60 "$B/bin/runtime_test" --gtest_filter='*DeviceMemory*:*MemoryPool*'

# 4. The bench (bench/run gpu).
step gpu-bench 150 bash -o pipefail -c "'$B/bin/gpu_bench' | tee '$OUT/bench.txt'"

# 5. The demo on the embedded pool over the real GPU.
step demo 60 "$G" demo

echo "===== summary" >> "$LOG"
printf '%s\n' "${summary[@]}" | tee -a "$LOG"
grep -E "^\s+(allreduce|d2h|h2d|alloc|scrub|diagnostic)_" "$OUT/bench.txt" 2>/dev/null | head -n 40
echo "$failed step(s) failed"
[ "$failed" = 0 ]
