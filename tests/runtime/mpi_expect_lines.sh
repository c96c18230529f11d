#!/usr/bin/env bash
# Runs an mpirun job in which one rank is killed on purpose and checks the survivors' output.
# mpirun itself reports the killed rank and exits non-zero, so its status says nothing: each
# expected line (an extended regular expression, matched against whole lines) must be printed.
#
#   mpi_expect_lines.sh MPIEXEC NP PROGRAM [ARGS...] -- PATTERN...
#
# --enable-recovery keeps the survivors alive (Open MPI 4.1 aborts the job otherwise); gpupool
# makes no MPI call after bootstrap, so they carry on.
set -uo pipefail
mpiexec=$1
np=$2
shift 2
command=()
while [[ $# -gt 0 && $1 != "--" ]]; do
  command+=("$1")
  shift
done
shift  # the --
out=$("$mpiexec" --allow-run-as-root --oversubscribe --enable-recovery -np "$np" "${command[@]}" 2>&1)
echo "$out"
fail=0
for pattern in "$@"; do
  if ! grep -qxE "$pattern" <<<"$out"; then
    echo "FAILED: expected a line matching '$pattern'"
    fail=1
  fi
done
exit $fail
