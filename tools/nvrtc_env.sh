# Sourced by tools/cuda_check.sh and tools/gpu/pack.sh: NVRTC 13.0 from PyPI (the GPU machine's
# version) in target/nvrtc-venv, installed once, and LD_LIBRARY_PATH pointing at it, so the
# engine compiles kernels for sm_90 on a machine without CUDA.
venv=target/nvrtc-venv
if ! find "$venv" -name 'libnvrtc.so.13' 2>/dev/null | grep -q .; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 10 --timeout 120 nvidia-cuda-nvrtc==13.0.88
fi
lib=$(cd "$(dirname "$(find "$venv" -name libnvrtc.so.13 | head -n 1)")" && pwd)
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
