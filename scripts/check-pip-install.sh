#!/usr/bin/env bash
# Checks `pip install .` end to end, as a user would run it: a fresh venv in a temporary
# directory, this checkout pip-installed into it (pyproject.toml: the project's CMake build in
# ./build-pip, with ccache, so a second run recompiles only what changed), then, from /tmp (outside
# the source tree): the package imports from the venv, a task runs on the embedded simulated pool,
# and the `gpupool` command answers. Not run by CI: it builds the runtime again (70 s here with
# ccache warm from ./build, 18 s with build-pip up to date, 20 min with no ccache on 2 busy cores).
#   scripts/check-pip-install.sh          (PYTHON=interpreter to make the venv with; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
"${PYTHON:-python3}" -m venv "$venv" || { echo "FAIL: ${PYTHON:-python3} -m venv $venv"; exit 1; }
echo "pip install $src into $venv (build log: build-pip/pip-install.log)"
mkdir -p build-pip
start=$SECONDS
if ! "$venv/bin/pip" install -v "$src" > build-pip/pip-install.log 2>&1; then
  tail -n 40 build-pip/pip-install.log
  echo "FAIL: pip install $src (see build-pip/pip-install.log)"
  exit 1
fi
echo "pip install took $((SECONDS - start)) s"

cd /tmp
"$venv/bin/python" - "$venv" <<'PY'
import os
import sys

import gpupool

venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(gpupool.__file__)
if not where.startswith(venv + os.sep):
    sys.exit("FAIL: gpupool was imported from %s, not from the venv %s" % (where, venv))


@gpupool.remote
def square(x):
    return x * x


notice = gpupool.init(simulate="1xH100-80GB")
result = gpupool.get(square.submit(3), timeout=60)
if result != 9:
    sys.exit("FAIL: square.submit(3) gave %r, expected 9" % (result,))
print("gpupool %s from %s: square.submit(3) -> %d on the embedded pool (%s)"
      % (gpupool.__version__, os.path.dirname(where), result, notice or "no notice"))

# A process=True task runs in a worker process of the venv's interpreter, which needs the
# declared cloudpickle from the venv (a function defined here, in __main__, travels by value).
in_worker = gpupool.remote(process=True)(lambda x: (x + 1, os.getpid()))
value, pid = gpupool.get(in_worker.submit(41), timeout=60)
if value != 42 or pid == os.getpid():
    sys.exit("FAIL: a process=True task gave %r in pid %d (the driver is %d)" % (value, pid, os.getpid()))
print("process=True: 41 + 1 -> %d in worker process %d" % (value, pid))
PY
out=$("$venv/bin/gpupool" devices --simulate 2xL4) || { echo "FAIL: $venv/bin/gpupool devices"; exit 1; }
echo "$out" | grep -q '1 node, 2 GPUs (2 L4)' || { echo "$out"; echo "FAIL: gpupool devices did not list the 2 simulated L4s"; exit 1; }
echo "gpupool command: $(echo "$out" | tail -n 1)"
echo PASS
