#!/usr/bin/env bash
# The book (docs/): built to HTML in target/book by scripts/book.py, every chapter of
# docs/src/SUMMARY.md rendered and every link and anchor checked. Its examples are checked by
# the CLI's book test (crates/wirespeed-cli/tests/book.rs). Ends with a line in cargo's format.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 scripts/book.py --out "${CARGO_TARGET_DIR:-target}/book"
