#!/usr/bin/env bash
# The README's second command (and CI's): installs what is needed, builds, and runs every test:
# GoogleTest suites, command-line tests, the install/find_package test and pytest, via CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600
