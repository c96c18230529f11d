#!/usr/bin/env bash
# Installs every system and Python dependency gpupool needs on Debian 12. Idempotent: a second run
# changes nothing and takes a few seconds. Needs root (or sudo) for apt-get.
#
# The CUDA 13 toolkit (cudart, nvcc, NCCL) is expected in /usr/local/cuda, as on this project's
# machines; Debian does not package it. Everything else comes from Debian, and the one header
# Debian lacks (nvml.h) is not needed: the NVIDIA driver is declared by hand and loaded at run time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  ccache  # scripts/build.sh compiles through it: a second checkout rebuilds from the cache
  clang  # the thread-safety analysis (scripts/check_thread_safety.py); GCC builds
  libucx-dev ucx-utils libopenmpi-dev openmpi-bin
  libcapnp-dev capnproto libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-pybind11 python3-dev python3-pytest python3-numpy python3-cloudpickle
  libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libzstd-dev libhwloc-dev
  libssl-dev  # HMAC-SHA256 (libcrypto): a worker and its driver prove the job's key to each other
  procps  # pgrep: tests check the process table (no worker outlives its driver)
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: all ${#packages[@]} Debian packages present"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: warning: no CUDA toolkit at /usr/local/cuda; the build needs nvcc, cudart and NCCL" >&2
fi

# The tests and the Python module use Debian's interpreter (/usr/bin/python3), whose pytest, numpy
# and pybind11 come from the packages above, so nothing is needed from PyPI today.
/usr/bin/python3 -c 'import pytest, numpy, pybind11' \
  || { echo "install-deps: /usr/bin/python3 lacks pytest/numpy/pybind11" >&2; exit 1; }
echo "install-deps: done"
