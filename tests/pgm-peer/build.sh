#!/usr/bin/env bash
# Build the OpenPGM test peer: tests/pgm-peer/build.sh [OUTPUT]  (default target/openpgm-peer)
# Installs nothing; needs gcc and Debian's libpgm-dev (OpenPGM 5.3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/openpgm-peer}"
if ! pkg-config --exists openpgm-5.3 2>/dev/null || [ ! -f /usr/include/pgm-5.3/pgm/pgm.h ]; then
    echo "build.sh: OpenPGM 5.3 development files not found; install them with: apt-get install libpgm-dev" >&2
    exit 1
fi
command -v "${CC:-gcc}" >/dev/null || { echo "build.sh: no C compiler (${CC:-gcc}); install it with: apt-get install gcc" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2046
"${CC:-gcc}" -std=c99 -O2 -g -Wall -Wextra -Werror \
    $(pkg-config --cflags openpgm-5.3) \
    -o "$out" "$here/openpgm-peer.c" \
    $(pkg-config --libs openpgm-5.3)
echo "$out"
