#!/usr/bin/env bash
# Build the Debian package of wirespeed: target/debian/wirespeed_VERSION-1_ARCH.deb.
#
# 1. builds the binary (the release profile, or WIRESPEED_PROFILE's); 2. runs it to generate
# what the package installs besides it, into target/PROFILE/deb-stage/usr: the manual pages (one per command, gzipped), the bash, zsh and fish
# completions, and the JSON Schemas found in schemas/ (none yet is fine); 3. packs everything
# with cargo-deb (metadata: [package.metadata.deb] in crates/wirespeed-cli/Cargo.toml). Prints
# the path of the .deb on its last line.
#
# Needs cargo-deb (cargo install cargo-deb --locked) and dpkg-dev (dpkg-shlibdeps, for Depends).
# WIRESPEED_PROFILE=NAME packs the build of another Cargo profile (the test suite packs its
# `tests` build, so that it tests the packaging without a second build); a release is `release`.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-deb >/dev/null 2>&1 || {
    echo "build-deb.sh: cargo-deb is not installed: cargo install cargo-deb --locked" >&2
    exit 1
}
command -v dpkg-shlibdeps >/dev/null 2>&1 || {
    echo "build-deb.sh: dpkg-shlibdeps is missing (it finds the libraries to depend on): sudo apt-get install dpkg-dev" >&2
    exit 1
}

profile=${WIRESPEED_PROFILE:-release}
# --workspace: the crates' features are resolved over the whole workspace, as `cargo test`
# resolves them, so after the test suite this finds its build fresh instead of making another.
cargo build --profile "$profile" --locked --workspace --bins >&2
bin="${CARGO_TARGET_DIR:-target}/$profile/wirespeed"

# cargo-deb reads this tree as one asset glob (target/release/deb-stage/usr/**/* -> /usr/,
# found in the real target directory of the profile, as the binary is), so it is made afresh
# each time and holds only what this build generated.
stage="${CARGO_TARGET_DIR:-target}/$profile/deb-stage"
rm -rf "$stage"
man1="$stage/usr/share/man/man1"
"$bin" man --out "$man1" >/dev/null
gzip -9n "$man1"/*.1
install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d"
"$bin" completions bash >"$stage/usr/share/bash-completion/completions/wirespeed"
"$bin" completions zsh >"$stage/usr/share/zsh/vendor-completions/_wirespeed"
"$bin" completions fish >"$stage/usr/share/fish/vendor_completions.d/wirespeed.fish"
schemas=0
for f in schemas/*.json; do
    [ -f "$f" ] || continue
    install -D -m 644 "$f" "$stage/usr/share/wirespeed/schemas/$(basename "$f")"
    schemas=$((schemas + 1))
done
# Debian's changelog.Debian.gz: one entry for this build, its version and date those of the
# binary and of the commit it was built from (so the same commit packs the same bytes).
version=$("$bin" --version | awk '{print $2}')
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' crates/wirespeed-cli/Cargo.toml)
commit=$(git describe --always --dirty 2>/dev/null || echo "an unknown commit")
date=$(git log -1 --format=%aD 2>/dev/null || date -R)
doc="$stage/usr/share/doc/wirespeed"
install -d "$doc"
printf 'wirespeed (%s-1) unstable; urgency=medium\n\n  * Packed by packaging/build-deb.sh from commit %s.\n\n -- %s  %s\n' \
    "$version" "$commit" "$maintainer" "$date" | gzip -9n >"$doc/changelog.Debian.gz"
echo "build-deb.sh: $(ls "$man1" | wc -l) manual pages, 3 completion scripts, $schemas JSON Schemas staged" >&2

out="${CARGO_TARGET_DIR:-target}/debian"
mkdir -p "$out"
cargo deb -p wirespeed-cli --no-build --locked --profile "$profile" --output "$out/"
