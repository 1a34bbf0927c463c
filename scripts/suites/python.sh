#!/usr/bin/env bash
# The Python package (crates/wirespeed-py): build its wheel with maturin, install it, and run
# its pytest suite against the built `wirespeed` binary. Ends with one line in cargo's format,
# "test result: ok. N passed; M failed; ...", and exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

verdict() { # passed failed ignored
  local word=ok
  [ "$2" -eq 0 ] || word=FAILED
  echo "test result: $word. $1 passed; $2 failed; $3 ignored; 0 measured; 0 filtered out"
}
die() {
  echo "python.sh: $*" >&2
  verdict 0 1 0
  exit 1
}

python3 -c "import maturin, numpy, pytest, baseband" 2>/dev/null ||
  die "needs the Python packages maturin, numpy, pytest and baseband: python3 -m pip install maturin numpy pytest baseband (scripts/test.sh installs them)"
if command -v maturin >/dev/null 2>&1; then maturin=(maturin); else maturin=(python3 -m maturin); fi

# The tests drive the command itself (record, send, verify); cargo test has built it already,
# with the profile scripts/test.sh names (release when this runs alone). The wheel is built
# with the same profile.
profile=${WIRESPEED_PROFILE:-release}
cargo build --profile "$profile" --workspace --bins --quiet || die "cargo build --profile $profile --workspace --bins failed"

wheels=target/wheels-python
rm -rf "$wheels"
"${maturin[@]}" build --profile "$profile" --quiet -m crates/wirespeed-py/Cargo.toml -o "$wheels" ||
  die "maturin could not build the wheel"
wheel=$(ls "$wheels"/wirespeed-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || die "maturin left no wheel in $wheels"
echo "python.sh: built $wheel"
# numpy is already there, so pip needs no network; --force-reinstall replaces an older build.
python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" ||
  die "pip could not install $wheel"

junit=$(mktemp)
trap 'rm -f "$junit"' EXIT
# Run from outside the source tree, so `import wirespeed` is the installed wheel.
(cd crates/wirespeed-py/tests &&
  WIRESPEED_BIN="$(cd ../../.. && realpath -m "${CARGO_TARGET_DIR:-target}")/$profile/wirespeed" timeout 900 \
    python3 -m pytest -q -p no:cacheprovider --junitxml="$junit" .)
status=$?
read -r tests failures errors skipped < <(python3 - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 0, 1, 0)
    raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) for s in suites)
e = sum(int(s.get("errors", 0)) for s in suites)
k = sum(int(s.get("skipped", 0)) for s in suites)
print(t, f, e, k)
PY
)
failed=$((failures + errors))
passed=$((tests - failed - skipped))
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1 # pytest failed without a test failing (collection, import): a failure all the same
fi
verdict "$passed" "$failed" "$skipped"
[ "$failed" -eq 0 ] && [ "$status" -eq 0 ]
