#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: installs what the tests need, then checks
# formatting, lints, and runs every test (root-only tests run when this runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v cc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "test.sh: missing ${need[*]}; root-only tests will not run (sudo apt-get install ${need[*]})" >&2
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found: install Rust stable (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

cargo fmt --all -- --check
cargo clippy --all-targets --release -- -D warnings
cargo test --release
