#!/usr/bin/env bash
# The dashboard's browser test (dashboard/browser-test/dashboard.test.mjs): a real `amdahl
# serve` driven by headless Debian Chromium through playwright-core (npm; no browser download).
# Saves target/dashboard-artifacts/dashboard.png.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --quiet -p amdahl
(cd dashboard/browser-test && npm ci --no-audit --no-fund --loglevel=error)
export AMDAHL_BIN=${AMDAHL_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/amdahl}
cd dashboard/browser-test && node --test dashboard.test.mjs
