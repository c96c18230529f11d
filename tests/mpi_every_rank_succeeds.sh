#!/usr/bin/env bash
# Runs an mpirun job and fails unless every rank exits with status 0.
#
#   mpi_every_rank_succeeds.sh MPIEXEC NP PROGRAM [ARGS...]
#
# With --enable-recovery (the README's mpirun lines use it, so that one rank's death does not
# abort the others) Open MPI 4.1's mpirun exits 0 even when ranks failed: its own status says
# nothing. So each rank runs under a shell that prints the rank's exit status, and every rank's
# must be 0 (a rank killed by a signal shows 128 + the signal).
set -uo pipefail
mpiexec=$1
np=$2
shift 2
out=$("$mpiexec" --allow-run-as-root --oversubscribe --enable-recovery -np "$np" \
  bash -c '"$@"; echo "gpupool-test: rank ${OMPI_COMM_WORLD_RANK} exited with status $?"' rank "$@" 2>&1)
echo "$out"
fail=0
for ((r = 0; r < np; ++r)); do
  if ! grep -qx "gpupool-test: rank $r exited with status 0" <<<"$out"; then
    echo "FAILED: rank $r did not exit with status 0"
    fail=1
  fi
done
exit $fail
