#!/usr/bin/env bash
# The OpenPGM test peer (tests/pgm-peer/) against itself: tests/pgm-peer/selftest.sh builds it
# with libpgm-dev and runs OpenPGM <-> OpenPGM transfers with and without loss in two network
# namespaces, so that a failure of wirespeed's interoperability tests (tests/pgm_interop.rs)
# can be told apart from a broken peer. Needs root; without it every test counts as ignored.
# Ends with one line in cargo's format, "test result: ok. N passed; M failed; ...", and exits
# non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

selftest=tests/pgm-peer/selftest.sh
n=$(bash "$selftest" --list | wc -l)
if [ "$(id -u)" != 0 ]; then
  echo "pgm-peer suite: needs root (network namespaces); $n tests not run"
  echo "test result: ok. 0 passed; 0 failed; $n ignored; 0 measured; 0 filtered out"
  exit 0
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 1200 bash "$selftest" >"$out" 2>&1
status=$?
# Everything but its closing line; that line is passed on only if it is there and agrees
# with the exit status, so the suite ends with exactly one verdict.
last=$(tail -n 1 "$out")
grep -v '^test result:' "$out"
if [[ "$last" == "test result: ok."* && $status == 0 ]] || [[ "$last" == "test result: FAILED."* && $status != 0 ]]; then
  echo "$last"
  exit "$status"
fi
# It stopped early (no peer built, no namespaces, killed by the timeout): the tests that did not
# say ok failed.
passed=$(grep -c '^test .* \.\.\. ok' "$out")
echo "pgm-peer suite: $selftest exited $status without its result line (see above)"
echo "test result: FAILED. $passed passed; $((n - passed)) failed; 0 ignored; 0 measured; 0 filtered out"
exit 1
