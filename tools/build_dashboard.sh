#!/usr/bin/env bash
# Builds the Leptos dashboard (dashboard/) to wasm and writes dashboard/pkg/, which `amdahl
# serve` embeds (web/build.rs). The whole recipe is here; .ci/run calls it.
#
# rustup cannot fetch the wasm32 target on our machines, so this uses Debian's rustc-web (1.96,
# LLVM with the WebAssembly backend) and builds std for wasm32 from rust-web-src with
# -Zbuild-std. wasm-bindgen-cli must equal the wasm-bindgen version in dashboard/Cargo.lock; it
# is installed once with rustup's cargo into target/tools/ and reused.
#
# Option: --no-apt  do not install Debian packages (fail if they are missing).
# Elsewhere (rustup + network): `rustup target add wasm32-unknown-unknown`, `cargo install
# wasm-bindgen-cli --version <lock's>`, then `cargo build --release` in dashboard/ and the same
# wasm-bindgen line as below.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
apt=1
for a in "$@"; do
  case $a in
    --no-apt) apt=0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
say() { echo "build_dashboard: $* ($(( $(date +%s) - t0 ))s)"; }

# 1. Debian's wasm-capable compiler and the std source of the same version.
need=()
for p in rustc-web cargo-web rust-web-src rust-web-llvm lld-22; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ $apt -eq 1 ] || { echo "missing Debian packages: ${need[*]}" >&2; exit 1; }
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
v=$(/usr/bin/rustc -V | awk '{print $2}')
test -f "/usr/src/rustc-$v/library/Cargo.lock" || {
  echo "rust-web-src does not match rustc-web $v" >&2; exit 1; }

# 2. wasm-bindgen-cli at exactly the lock's version (cached under target/tools/).
wbv=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' dashboard/Cargo.lock)
[ -n "$wbv" ] || { echo "no wasm-bindgen in dashboard/Cargo.lock" >&2; exit 1; }
tools=${CARGO_TARGET_DIR:-$root/target}/tools/wasm-bindgen-$wbv
wb=$tools/bin/wasm-bindgen
if ! { [ -x "$wb" ] && "$wb" --version | grep -qF " $wbv"; }; then
  say "installing wasm-bindgen-cli $wbv"
  # Not --locked: its lock names a dependency version the index may lack.
  cargo install --quiet wasm-bindgen-cli --version "=$wbv" --root "$tools"
fi

# 3. The wasm build, in the dashboard's own target/ (never the server workspace's).
say "building the wasm (rustc-web $v)"
(
  cd dashboard
  RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 /usr/bin/cargo build --release --locked \
    -Zbuild-std=std,panic_abort
)
wasm=dashboard/target/wasm32-unknown-unknown/release/amdahl_dashboard.wasm
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$wb" --target web --no-typescript --remove-name-section --remove-producers-section \
  --out-dir "$out" "$wasm"

# 4. The stamp: which sources this pkg was built from (web/tests/dashboard_pkg.rs checks it).
stamp() {
  (cd "$root" && { printf '%s\n' dashboard/Cargo.toml dashboard/Cargo.lock protocol/Cargo.toml
      find dashboard/src protocol/src -type f -name '*.rs'; } | LC_ALL=C sort |
    while read -r f; do printf '%s\0' "$f"; cat "$f"; printf '\0'; done | sha1sum | cut -d' ' -f1)
}
stamp >"$out/SOURCES.sha1"
mkdir -p dashboard/pkg
for f in amdahl_dashboard.js amdahl_dashboard_bg.wasm SOURCES.sha1; do
  cmp -s "$out/$f" "dashboard/pkg/$f" || cp "$out/$f" "dashboard/pkg/$f"
done
say "dashboard/pkg: $(du -k dashboard/pkg/amdahl_dashboard_bg.wasm | cut -f1) KB wasm"
