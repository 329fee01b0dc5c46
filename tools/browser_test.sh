#!/usr/bin/env bash
# The dashboard's browser test (dashboard/browser-test/dashboard.test.mjs): a real `amdahl
# serve` driven by headless Debian Chromium through playwright-core (npm; no browser download).
# Saves target/dashboard-artifacts/dashboard.png.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
cargo build --quiet -p amdahl
(cd dashboard/browser-test && npm ci --no-audit --no-fund --loglevel=error)
export AMDAHL_BIN=${AMDAHL_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/amdahl}
cd dashboard/browser-test && node --test dashboard.test.mjs
