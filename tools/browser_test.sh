#!/usr/bin/env bash
# The dashboard's browser test (dashboard/browser-test/dashboard.test.mjs): a real `amdahl
# serve` driven by headless Debian Chromium through playwright-core (npm; no browser download).
# Saves target/dashboard-artifacts/dashboard.png. AMDAHL_BIN=path uses that server binary as is
# (CI passes the one `cargo test` built, which embeds the committed dashboard/pkg); otherwise
# the debug binary is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ -z "${AMDAHL_BIN:-}" ]; then
  cargo build --quiet -p amdahl
  AMDAHL_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/amdahl
fi
export AMDAHL_BIN=$(realpath "$AMDAHL_BIN")
(cd dashboard/browser-test && npm ci --no-audit --no-fund --loglevel=error)
cd dashboard/browser-test && node --test dashboard.test.mjs
