#!/usr/bin/env bash
# The book (docs/): built to HTML in target/book by scripts/book.py, every chapter of
# docs/src/SUMMARY.md rendered and every link, image and anchor checked. Its examples are checked
# by the CLI's book test (crates/wirespeed-cli/tests/book.rs). Ends with a line in cargo's format,
# also when book.py could not run at all.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
python3 scripts/book.py --out "${CARGO_TARGET_DIR:-target}/book" | tee "$out"
status=${PIPESTATUS[0]}
if ! tail -n 1 "$out" | grep -q '^test result:'; then
    echo "book suite: scripts/book.py exited $status without its result line (see above)"
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
    exit 1
fi
exit "$status"
