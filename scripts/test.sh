#!/usr/bin/env bash
# The README's second command (and CI's): installs what is needed, builds, and runs every test:
# GoogleTest suites, command-line tests, the install/find_package test and pytest (with the
# dashboard in headless Chromium), via CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The dashboard's browser test needs Chromium; without it (no apt, no network) that test skips.
bash scripts/install-browser-test.sh >/dev/null 2>&1 || echo "test.sh: Chromium not installed: the dashboard test will skip"
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600
