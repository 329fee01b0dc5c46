#!/usr/bin/env bash
# Runs tools/openai_client_check.py (the official OpenAI Python client) against a real
# `amdahl serve` on 127.0.0.1 with a free port, serving the embedded default model.
# Installs `openai` into target/openai-venv (PyPI) on first use; builds the binary if needed.
# Usage: bash tools/openai_client_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
venv=target/openai-venv
# Pinned to the SDK version this check was last verified with (2026-12-03).
sdk=3.57.0
if [ ! -x "$venv/bin/python" ] ||
  ! "$venv/bin/python" -c "import openai; assert openai.__version__ == '$sdk'" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 10 --timeout 120 \
    "openai==$sdk"
fi
cargo build --quiet -p amdahl
log=$(mktemp)
key="openai-sdk-test-key"
"$target/debug/amdahl" serve --port 0 --api-key "$key" >"$log" 2>&1 &
pid=$!
cleanup() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
url=""
for _ in $(seq 1 200); do
  url=$(sed -n 's/^listening on //p' "$log")
  [ -n "$url" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then cat "$log"; echo "amdahl serve exited"; exit 1; fi
  sleep 0.05
done
[ -n "$url" ] || { cat "$log"; echo "amdahl serve did not start"; exit 1; }
"$venv/bin/python" tools/openai_client_check.py "$url" "$key"
