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
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# Runs on hosts are tested against OpenSSH servers started inside partitions.
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
# The OpenPGM peer of the PGM interoperability tests is built against Debian's libpgm 5.3.
pkg-config --exists openpgm-5.3 2>/dev/null || need+=(libpgm-dev pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need[*]}"
    apt-get update -qq
    # policy-rc.d 101: packages such as prometheus install their service but must not start it here.
    rc=/usr/sbin/policy-rc.d; made_rc=
    [ -e "$rc" ] || { printf '#!/bin/sh\nexit 101\n' >"$rc"; chmod 755 "$rc"; made_rc=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
      echo "test.sh: could not install ${need[*]}; tests that need them say so" >&2
    [ -n "$made_rc" ] && rm -f "$rc"
  else
    echo "test.sh: missing ${need[*]}; root-only tests will not run (sudo apt-get install ${need[*]})" >&2
  fi
fi
# Interoperability tests read and exchange data with independent implementations from PyPI; the
# Python package is built with maturin and tested with pytest; JSON Schemas are checked with
# jsonschema; the book is built with markdown-it-py.
if ! python3 -c "import baseband, spead2, hdrh, numpy, pytest, jsonschema, maturin, markdown_it" >/dev/null 2>&1; then
  echo "test.sh: installing the Python packages baseband, spead2, hdrhistogram, numpy, pytest, jsonschema, maturin and markdown-it-py"
  python3 -m pip install --quiet --disable-pip-version-check baseband spead2 hdrhistogram numpy pytest jsonschema maturin markdown-it-py ||
    echo "test.sh: could not install the Python packages; the tests that need them will fail and say so" >&2
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found: install Rust stable (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Tests are built with the `tests` profile (Cargo.toml: release without LTO); the suites below
# use the same build, named by WIRESPEED_PROFILE.
export WIRESPEED_PROFILE=tests
cargo fmt --all -- --check
cargo clippy --all-targets --profile "$WIRESPEED_PROFILE" -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Root-only tests are marked #[ignore = "needs root"]: they run when this runs as root (CI does),
# and show as ignored, not passed, otherwise.
extra=()
[ "$(id -u)" = 0 ] && extra=(--include-ignored)
set +e
cargo test --profile "$WIRESPEED_PROFILE" --no-fail-fast -- "${extra[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# Further suites that cargo test cannot run (the Python package, the Debian package) live in
# scripts/suites/*.sh; each ends with a line "test result: ok. N passed; M failed" like cargo's.
for suite in scripts/suites/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $suite"
  bash "$suite" 2>&1 | tee -a "$log"
  s=${PIPESTATUS[0]}
  [ "$s" = 0 ] || { echo "test.sh: $suite failed (exit $s)" >&2; status=1; }
done
set -e
# One closing line over every test binary (cargo's own last line is the doc-test summary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "wirespeed tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
