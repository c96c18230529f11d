# Sourced by the examples' two-node tests (tasks_anywhere.sh, hparam_sweep.sh): a `gpupool head`
# over two nodes of two simulated GPUs and an agent per node (node-0, node-1, workers allowed as
# root), as real processes on loopback, all stopped when the test exits.
# Needs $cli (the gpupool binary). Sets $dir (logs and files), $port (the head's), $team_token (the
# team "default"'s token); defines fail MESSAGE (prints every log, exits 1).
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

team_token=team-secret-0123456789
printf 'default: %s\nagents: agent-secret-0123456789\n' "$team_token" > "$dir/tokens"
echo agent-secret-0123456789 > "$dir/agent-token"
"$cli" head --simulate 2xH100-80GB --node-count 2 --tokens "$dir/tokens" --listen 127.0.0.1:0 \
  --port-file "$dir/port" > "$dir/head.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
[[ -s $dir/port ]] || fail "the head wrote no port file in 10 s"
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
(( $(grep -l registered "$dir"/agent-*.log 2>/dev/null | wc -l) == 2 )) || fail "both agents did not register in 10 s"
