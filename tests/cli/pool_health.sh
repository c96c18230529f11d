#!/usr/bin/env bash
# Keeping the pool healthy (issue 24) on a running pool: a real `gpupool head` (with a journal) and
# a real `gpupool agent` over two simulated GPUs, faults injected into the agent's GPUs with
# --inject, and what the head says about them read with `gpupool status --json` and from the
# journal's health_events table. One scenario per run:
#   pool_health.sh GPUPOOL_CLI SCENARIO [DRIVER_BINARY]
# Scenarios:
#   silent-corruption   caught by the next diagnostic, drained, quarantined; `repaired` -> diagnostics
#                       pass -> healthy again. Prints "fault injected -> no new lease" for it.
#   ecc-latency         a double-bit ECC error: prints "fault injected -> no new lease" (target <= 2 s).
#   xid-under-task      a critical XID under a checkpointable task: it snapshots and resumes from
#                       that step on the other GPU, with the uninterrupted result.
#   xid13-stays-healthy an application XID changes nothing.
#   diagnostic-lease    a diagnostic holds a lease of team _pool (shown by `status`); a job whose
#                       work needs its GPU interrupts it at once and runs; `usage --by workload`
#                       charges the tests' time to `diagnostics`.
#   keeps-failing       silent corruption never repaired: failed after 3 diagnostics, `resume` is refused,
#                       and a job's tasks never run on it (DRIVER_BINARY: tasks_anywhere).
#   operators           drain/resume/repaired with the operators' token, refused with a team's,
#                       bad targets named, `status --reasons`, `node drain|resume`.
#   health-check        a failing --health-check-program drains the node with its output as reason.
set -euo pipefail
cli=$1
scenario=$2
driver=${3:-}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- head"; cat "$dir/head.log"; echo "--- agent"; cat "$dir/agent.log"; exit 1; }

ops=ops-secret-0123456789
team=team-secret-0123456789
printf 'default: %s\nagents: agent-secret-0123456789\noperators: %s\n' "$team" "$ops" > "$dir/tokens"
echo agent-secret-0123456789 > "$dir/agent-token"

head_flags=()
start_pool() {  # extra agent flags (extra head flags in head_flags)
  "$cli" head --simulate 2xH100-80GB --node-count 1 --tokens "$dir/tokens" --listen 127.0.0.1:0 \
    --port-file "$dir/port" --journal "$dir/head.db" "${head_flags[@]}" > "$dir/head.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
  port=$(cat "$dir/port")
  "$cli" agent --head "127.0.0.1:$port" --node node-0 --simulate 2xH100-80GB --token-file "$dir/agent-token" \
    --allow-root-workers "$@" > "$dir/agent.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q registered "$dir/agent.log" 2>/dev/null && break; sleep 0.1; done
  grep -q registered "$dir/agent.log" || fail "the agent did not register"
}

status_json() { "$cli" status --json --pool "127.0.0.1:$port" --token "$ops"; }
gpu_field() {  # GPU FIELD
  status_json | jq -r ".nodes[0].gpus[] | select(.index == $1) | .$2"
}
wait_health() {  # GPU STATE SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  while (( $(date +%s) <= deadline )); do
    [[ $(gpu_field "$1" health) == "$2" ]] && return 0
    sleep 0.1
  done
  fail "GPU $1 is $(gpu_field "$1" health), not $2, after $3 s"
}
events() {  # the journal's health transitions, one per line: node/gpu from to actor reason
  sqlite3 "file:$dir/head.db?mode=ro" \
    "SELECT node || '/' || gpu, from_state, to_state, actor, reason, printf('%.3f', t_s) FROM health_events ORDER BY seq" \
    2>/dev/null | tr '|' ' '
}
# The journal commits in the background (group commit): a transition the head already shows may be
# on disk a moment later.
wait_event() {  # REGEX WHAT
  for _ in $(seq 50); do events | grep -q "$1" && return 0; sleep 0.1; done
  fail "no journaled $2: $(events)"
}
injected_at() { grep -Eo "injected $1 at [0-9.]+" "$dir/agent.log" | awk '{print $4}'; }
# Seconds from the injection of SPEC to the journaled transition of GPU to `draining` (the moment
# the scheduler stopped placing leases on it: both happen under the pool's lock).
latency() {  # SPEC GPU
  local t0 t1
  t0=$(injected_at "$1")
  wait_event "^node-0/$2 healthy draining" "drain of GPU $2"
  t1=$(sqlite3 "file:$dir/head.db?mode=ro" \
    "SELECT printf('%.3f', t_s) FROM health_events WHERE gpu = $2 AND to_state = 'draining' ORDER BY seq LIMIT 1")
  [[ -n $t0 && -n $t1 ]] || fail "no injection time ($t0) or no draining transition ($t1) for $1"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

case $scenario in
  silent-corruption)
    head_flags=(--health-failures-to-fail 20)  # however many diagnostics run before the repair
    start_pool --diagnose-every 1 --quarantine-retry 0.5 --inject 1:silent-corruption@2 --inject 1:repaired@5
    wait_health 1 quarantined 10
    status_json | jq -e '.nodes[0].gpus[1].health_reasons | any(test("diagnostic failed"))' > /dev/null \
      || fail "the reasons do not say the diagnostic failed"
    [[ $(gpu_field 1 last_diagnostic_result) == failed ]] || fail "last_diagnostic_result is not failed"
    [[ $(gpu_field 0 health) == healthy ]] || fail "GPU 0 was affected"
    echo "fault injected -> no new lease (silent corruption, diagnose every 1 s): $(latency 1:silent-corruption@2 1) s"
    wait_health 1 healthy 15
    [[ $(gpu_field 1 last_diagnostic_result) == passed ]] || fail "back without a passed diagnostic"
    wait_event '^node-0/1 healthy draining diagnostic diagnostic failed' drain
    wait_event '^node-0/1 draining quarantined pool' quarantine
    wait_event '^node-0/1 quarantined healthy diagnostic passed 2 diagnostics in a row' return
    events
    ;;
  ecc-latency)
    # The agent reads health every second from its start: offsets of 0.5 and 0.9 s into that period.
    start_pool --diagnose-every 0 --inject 0:ecc-dbe@2.5 --inject 1:xid-48@2.9
    wait_health 0 quarantined 10
    wait_health 1 quarantined 10
    echo "fault injected -> no new lease (ECC double-bit error): $(latency 0:ecc-dbe@2.5 0) s"
    echo "fault injected -> no new lease (XID 48): $(latency 1:xid-48@2.9 1) s"
    events
    ;;
  xid-under-task)
    # A critical XID on the GPU a checkpointable task runs on: the GPU drains, the task's lease is
    # revoked, it snapshots at its next safe point and resumes from that step on the other GPU once
    # that is free; both results equal the uninterrupted run's. (Two one-GPU tasks hold both GPUs,
    # so one of them is surely on GPU 0.) A Python driver, with the module built beside the CLI.
    start_pool --diagnose-every 0 --inject 0:xid-48@5  # a double-bit ECC error drains (79, off the bus, would lose the lease at once)
    python=/usr/bin/python3; [[ -x $python ]] || python=python3
    out=$(PYTHONPATH="$(dirname "$cli")/../python" GPUPOOL_ADDRESS="127.0.0.1:$port" GPUPOOL_TOKEN=$team \
          GPUPOOL_NODE=node-0 GPUPOOL_CHECKPOINT_DIR="$dir/checkpoints" timeout 60 "$python" -c '
import sys, time, gpupool

@gpupool.remote(gpus=1)
def train(name, steps):
    ctx = gpupool.context()
    state = {"total": 0}
    first = ctx.checkpointable(lambda: dict(state), state.update)
    slot = ctx.slots[0]
    # One write per line: print() writes its pieces separately, and the two tasks print at once.
    node, gpu = slot["node"], slot["gpu_index"]
    sys.stdout.write(f"{name} attempt {ctx.attempt} from step {first} on {node} GPU {gpu}\n")
    sys.stdout.flush()
    for s in range(first, steps):
        state["total"] += s
        time.sleep(0.1)
        ctx.step()
    return state["total"]

print("results", gpupool.get([train.submit("a", 80), train.submit("b", 80)], timeout=50), "expected", sum(range(80)))
' 2>&1) || fail "the job failed: $out"
    echo "$out"
    echo "$out" | grep -q '^results \[3160, 3160\] expected 3160$' || fail "the results are not the uninterrupted run's"
    echo "$out" | grep -Eq '^[ab] attempt 0 from step 0 on node-0 GPU 0$' || fail "no task started on GPU 0: $out"
    echo "$out" | grep -Eq '^[ab] attempt [1-9] from step [1-9][0-9]* on node-0 GPU 1$' \
      || fail "the task on GPU 0 did not resume from a snapshot on GPU 1: $out"
    [[ $(gpu_field 0 health) == quarantined ]] || fail "GPU 0 is $(gpu_field 0 health), not quarantined"
    events
    ;;
  diagnostic-lease)
    start_pool --diagnose-every 1 --simulated-diagnostic-s 60  # the first test outlasts the job
    diag_lease() { status_json | jq -r '[.leases[] | select(.team == "_pool")][0] | .gpus[0] // empty'; }
    for _ in $(seq 100); do [[ -n $(diag_lease) ]] && break; sleep 0.1; done
    held=$(diag_lease)
    [[ -n $held ]] || fail "no diagnostic lease of team _pool within 10 s: $(status_json | jq -c .leases)"
    echo "a diagnostic holds $held as team _pool"
    # Two one-GPU tasks: one of them needs the GPU under test, and takes it without waiting.
    python=/usr/bin/python3; [[ -x $python ]] || python=python3
    start=$(date +%s.%N)
    out=$(PYTHONPATH="$(dirname "$cli")/../python" GPUPOOL_ADDRESS="127.0.0.1:$port" GPUPOOL_TOKEN=$team \
          GPUPOOL_NODE=node-0 timeout 60 "$python" -c '
import time, gpupool
@gpupool.remote(gpus=1)
def work(i):
    time.sleep(0.5)
    return gpupool.context().slots[0]["gpu_index"]
print("gpus", sorted(gpupool.get([work.submit(i) for i in range(2)], timeout=30)))
' 2>&1) || fail "the job failed: $out"
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "$out" | grep -q '^gpus \[0, 1\]$' || fail "the tasks did not run on both GPUs: $out"
    echo "two one-GPU tasks ran on GPUs 0 and 1 in $took s (a test holds a GPU for 60 s)"
    for _ in $(seq 50); do grep -q "interrupted: work was placed on GPU node-0/" "$dir/agent.log" && break; sleep 0.1; done
    grep -q "interrupted: work was placed on GPU node-0/${held#node-0/}" "$dir/agent.log" \
      || fail "the agent does not say the test on $held was interrupted"
    awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "the job took $took s: it waited for the test"
    [[ $(gpu_field 0 health) == healthy && $(gpu_field 1 health) == healthy ]] || fail "an interrupted test changed health"
    # The tests' time is charged to the pool's own workload class.
    sleep 1
    usage=$("$cli" usage --pool "127.0.0.1:$port" --token "$ops" --by workload --since -1h --json)
    echo "$usage" | jq -e '.rows | any(.group == "diagnostics" and .gpu_hours > 0)' > /dev/null \
      || fail "usage has no diagnostics row: $usage"
    echo "usage by workload: $(echo "$usage" | jq -c '[.rows[] | {(.group): .gpu_hours}]')"
    ;;
  xid13-stays-healthy)
    start_pool --diagnose-every 1 --inject 0:xid-13@1 --inject 1:xid-48@1
    wait_health 1 quarantined 10  # the head has heard this agent's readings from after the injections
    wait_event '^node-0/1 draining quarantined' "quarantine of GPU 1"  # and the journal has caught up
    sleep 1
    [[ $(gpu_field 0 health) == healthy ]] || fail "XID 13 changed GPU 0's health"
    events | grep -q '^node-0/0 ' && fail "a transition was journaled for GPU 0: $(events)"
    echo "XID 13: GPU 0 stays healthy; XID 48 on GPU 1: $(gpu_field 1 health)"
    ;;
  keeps-failing)
    start_pool --diagnose-every 1 --quarantine-retry 0.2 --inject 1:silent-corruption@1
    wait_health 1 failed 20
    status_json | jq -e '.nodes[0].gpus[1].health_reasons | any(test("failed 3 diagnostics"))' > /dev/null \
      || fail "the reasons do not say it failed 3 diagnostics"
    out=$("$cli" gpu resume node-0/1 --pool "127.0.0.1:$port" --token "$ops" 2>&1) && fail "resume of a failed GPU: $out"
    echo "$out" | grep -q 'gpupool gpu repaired' || fail "the refusal does not say what to do: $out"
    if [[ -n $driver ]]; then
      out=$(GPUPOOL_ADDRESS="127.0.0.1:$port" GPUPOOL_TOKEN=$team GPUPOOL_NODE=node-0 timeout 60 "$driver" 4 0.2 2>&1) \
        || fail "the job failed: $out"
      echo "$out" | grep -q 'running on node-0/GPU 1' && fail "a task ran on the failed GPU: $out"
      (( $(echo "$out" | grep -c 'running on node-0/GPU 0') == 4 )) || fail "the tasks did not all run on GPU 0: $out"
      echo "4 tasks ran on node-0/GPU 0, none on the failed GPU 1"
    fi
    # A head restarted from its journal keeps the GPU failed (its agent comes back by itself).
    kill "${pids[0]}"
    wait "${pids[0]}" 2>/dev/null || true
    rm -f "$dir/port"
    "$cli" head --simulate 2xH100-80GB --node-count 1 --tokens "$dir/tokens" --listen "127.0.0.1:$port" \
      --port-file "$dir/port" --journal "$dir/head.db" > "$dir/head2.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
    for _ in $(seq 100); do [[ $(status_json | jq -r '.nodes[0].up') == true ]] && break; sleep 0.1; done
    [[ $(gpu_field 1 health) == failed ]] || fail "after a head restart GPU 1 is $(gpu_field 1 health), not failed"
    [[ $(gpu_field 0 health) == healthy ]] || fail "after a head restart GPU 0 is $(gpu_field 0 health)"
    "$cli" gpu repaired node-0/1 --reason "board swapped" --as alice --pool "127.0.0.1:$port" --token "$ops"
    [[ $(gpu_field 1 health) == quarantined ]] || fail "repaired did not quarantine"
    events
    ;;
  operators)
    start_pool --diagnose-every 0
    out=$("$cli" gpu drain node-0/0 --reason x --pool "127.0.0.1:$port" --token "$team" 2>&1) && fail "a team drained: $out"
    echo "$out" | grep -q "operators' token" || fail "the refusal does not name the operators' token: $out"
    out=$("$cli" gpu drain node-0/7 --reason x --pool "127.0.0.1:$port" --token "$ops" 2>&1) && fail "GPU 7 drained"
    echo "$out" | grep -q "no GPU 7" || fail "an unknown GPU is not named: $out"
    out=$("$cli" gpu drain node-0 --reason x --pool "127.0.0.1:$port" --token "$ops" 2>&1) && fail "no GPU index accepted"
    echo "$out" | grep -q "expected NODE/GPU" || fail "a malformed target is not explained: $out"
    out=$("$cli" gpu drain node-0/0 --pool "127.0.0.1:$port" --token "$ops" 2>&1) && fail "a drain without reason"
    echo "$out" | grep -q -- "--reason" || fail "a missing reason is not explained: $out"
    "$cli" gpu drain node-0/0 --reason "fan noise" --as alice --pool "127.0.0.1:$port" --token "$ops"
    wait_health 0 quarantined 5
    [[ $(gpu_field 0 drained_by) == alice && $(gpu_field 0 drain_reason) == "fan noise" ]] || fail "who and why are not shown"
    reasons=$("$cli" status --reasons --pool "127.0.0.1:$port" --token "$ops")
    echo "$reasons"
    echo "$reasons" | grep -E 'node-0/0 +quarantined .* alice .*drained by alice: fan noise' > /dev/null \
      || fail "status --reasons does not list the drained GPU"
    echo "$reasons" | grep -q 'node-0/1' && fail "status --reasons lists a healthy GPU"
    "$cli" gpu resume node-0/0 --as bob --pool "127.0.0.1:$port" --token "$ops"
    [[ $(gpu_field 0 health) == healthy ]] || fail "resume did not return the GPU"
    [[ $(gpu_field 0 drained_by) == null ]] || fail "drained_by stayed after resume"
    "$cli" node drain node-0 --reason "rack maintenance" --as alice --pool "127.0.0.1:$port" --token "$ops"
    wait_health 0 quarantined 5
    wait_health 1 quarantined 5
    "$cli" node resume node-0 --as alice --pool "127.0.0.1:$port" --token "$ops"
    wait_health 1 healthy 5
    wait_event '^node-0/0 healthy draining alice drained by alice: fan noise' "drain with who and why"
    wait_event '^node-0/0 quarantined healthy bob resumed by bob' resume
    events
    ;;
  health-check)
    printf '#!/bin/sh\necho "PSU 2 fault"\nexit 1\n' > "$dir/check.sh"
    chmod +x "$dir/check.sh"
    start_pool --diagnose-every 0 --health-check-program "$dir/check.sh" --health-check-every 1
    wait_health 0 quarantined 10
    wait_health 1 quarantined 10
    [[ $(gpu_field 0 drained_by) == health-check ]] || fail "drained_by is not health-check"
    [[ $(gpu_field 1 drain_reason) == "PSU 2 fault" ]] || fail "the reason is not the program's output: $(gpu_field 1 drain_reason)"
    events
    ;;
  *) echo "unknown scenario '$scenario'"; exit 2 ;;
esac
echo PASS
