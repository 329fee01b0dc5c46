#!/usr/bin/env bash
# CI's CUDA checks on a machine without a GPU: lints and builds the `cuda` feature (cudarc loads
# CUDA dynamically, so nothing CUDA is needed to build), builds the GPU test binary, and compiles
# every kernel module with NVRTC for sm_90 (NVRTC 13.0 from PyPI, the GPU machine's version).
# The GPU tests themselves run on the GPU machine (tools/gpu/run.sh); here they report a skip,
# except the NVRTC compile check, which AMDAHL_REQUIRE_NVRTC=1 makes mandatory.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/nvrtc_env.sh
# Clippy over every target with the feature on type-checks the binary and the GPU tests too.
cargo clippy -p amdahl-engine -p amdahl --all-targets --features amdahl/cuda -- -D warnings
AMDAHL_REQUIRE_NVRTC=1 AMDAHL_KERNEL_CACHE="$PWD/target/kernel-cache" \
  cargo test -p amdahl-engine --features cuda device::cuda
# The GPU machine's read-rate probe (tools/gpu/ring_probe.py) compiles with the same NVRTC.
target/nvrtc-venv/bin/python tools/gpu/ring_probe.py --compile-only
