#!/bin/sh
# What tests/python/test_dashboard.py needs (a real browser driven by Selenium): Debian's Chromium,
# its WebDriver and Selenium for /usr/bin/python3. The test skips, saying so, without them.
set -e
apt-get install -y chromium chromium-driver python3-selenium
