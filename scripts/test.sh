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
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null ||
      echo "test.sh: could not install ${need[*]}; tests that need them say so" >&2
  else
    echo "test.sh: missing ${need[*]}; root-only tests will not run (sudo apt-get install ${need[*]})" >&2
  fi
fi
# Interoperability tests read and exchange data with independent implementations from PyPI.
if ! python3 -c "import baseband, spead2, hdrh" >/dev/null 2>&1; then
  echo "test.sh: installing the Python packages baseband, spead2 and hdrhistogram (interoperability tests)"
  python3 -m pip install --quiet --disable-pip-version-check baseband spead2 hdrhistogram ||
    echo "test.sh: could not install baseband/spead2/hdrhistogram; the interoperability tests will fail and say so" >&2
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found: install Rust stable (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

cargo fmt --all -- --check
cargo clippy --all-targets --release -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Root-only tests are marked #[ignore = "needs root"]: they run when this runs as root (CI does),
# and show as ignored, not passed, otherwise.
extra=()
[ "$(id -u)" = 0 ] && extra=(--include-ignored)
set +e
cargo test --release --no-fail-fast -- "${extra[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (cargo's own last line is the doc-test summary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "wirespeed tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
