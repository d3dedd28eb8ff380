#!/usr/bin/env bash
# Install Debian's headless Chromium for the report's browser test, when it is missing and this
# machine can install it. Never fails the build: without Chromium the browser test skips and says why.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the browser test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "could not install chromium; the browser test will be skipped"
else
  echo "chromium not found and cannot be installed here (not root or no apt-get); the browser test will be skipped"
fi
exit 0
