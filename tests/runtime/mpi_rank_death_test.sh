#!/usr/bin/env bash
# One rank of a 3-rank gpupool job is killed with SIGKILL after its first tasks; the other two
# must finish their later tasks (mpirun --enable-recovery keeps them alive; gpupool makes no MPI
# call after bootstrap, and the head takes the dead rank's node down when its socket closes).
# mpirun itself reports the killed rank and exits non-zero: this script checks the survivors.
set -uo pipefail
mpiexec=$1
program=$2
out=$("$mpiexec" --allow-run-as-root --oversubscribe --enable-recovery -np 3 \
        "$program" --gpupool-simulate 2xH100-80GB --die-rank=2 2>&1)
echo "$out"
fail=0
for line in "rank 0 survived" "rank 1 survived" "rank 2 dying"; do
  if ! grep -qx "$line" <<<"$out"; then
    echo "FAILED: expected the line '$line'"
    fail=1
  fi
done
exit $fail
