#!/usr/bin/env bash
# Builds what tools/gpu/run.sh runs on the GPU machine and packs it for the device tool:
#   bash tools/gpu/pack.sh            # .gpu/{amdahl,engine-tests,kcache} → .gpup/g.tgz
#   BASE=<rev> bash tools/gpu/pack.sh # also .gpu/amdahl-base: <rev>'s binary and its kernels
# Then carry only the tarball (the device tool's `carry: [".gpup"]`): the tracked tree (~19 MB)
# and the carry must stay under 64 MiB together, and the unpacked binaries and kernel cache
# are ~60 MB. run.sh unpacks it when .gpu/amdahl is missing; `run.sh base` profiles
# .gpu/amdahl-base next to .gpu/amdahl in the same call (same machine, same shapes).
# Both .gpu/ and .gpup/ are ignored by git. About 5 minutes on 2 cores from a warm target/.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/nvrtc_env.sh
target=${CARGO_TARGET_DIR:-$PWD/target}
rm -rf .gpu && mkdir -p .gpu .gpup
if [ -n "${BASE:-}" ]; then
  # The base revision's binary, built in a worktree against the same target directory (the
  # dependencies are shared), and its kernels in the same cache (their keys differ).
  wt=$target/gpu-base
  git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
  git worktree add --quiet --detach "$wt" "$BASE"
  (cd "$wt" && CARGO_TARGET_DIR=$target cargo build --release --quiet -p amdahl --features cuda)
  cp "$target/release/amdahl" .gpu/amdahl-base
  git worktree remove --force "$wt"
  strip .gpu/amdahl-base
  .gpu/amdahl-base kernels --arch 90 --cache .gpu/kcache | tail -n 1
fi
cargo build --release --quiet -p amdahl --features cuda
tests=$(cargo test --release --quiet -p amdahl-engine --features cuda --lib --no-run --message-format=json |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' | tail -n 1)
cp "$target/release/amdahl" .gpu/amdahl
cp "$tests" .gpu/engine-tests
strip .gpu/amdahl .gpu/engine-tests
.gpu/amdahl kernels --arch 90 --pdl --cache .gpu/kcache | tail -n 1
tar czf .gpup/g.tgz .gpu
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
size=$(stat -c %s .gpup/g.tgz)
echo "packed .gpup/g.tgz: $((size >> 20)) MiB (+ $((tree >> 20)) MiB tracked; the device tool takes 64 MiB)"
if [ $((size + tree)) -gt $((64 << 20)) ]; then
  echo "too large for one call's carry" >&2
  exit 1
fi
