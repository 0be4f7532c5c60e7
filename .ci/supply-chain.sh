#!/usr/bin/env bash
# The supply-chain policy (deny.toml): `cargo deny check licenses bans sources` over every
# crate of Cargo.lock. cargo-deny is built from crates.io at a pinned version into
# target/tools/bin/ when missing (about 4 minutes on 2 cores; a second run builds nothing).
# Advisories need the RustSec database from its git repository, which CI here cannot reach:
# run `cargo deny check advisories` where it is reachable (docs/security.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
tools="$PWD/target/tools"
deny="$tools/bin/cargo-deny"
if command -v cargo-deny >/dev/null 2>&1 && cargo-deny --version | grep -qx "cargo-deny $version"; then
  deny=$(command -v cargo-deny)
elif ! { [ -x "$deny" ] && "$deny" --version | grep -qx "cargo-deny $version"; }; then
  printf '==> building cargo-deny %s from crates.io into %s\n' "$version" "$tools/bin"
  start=$(date +%s)
  cargo install --quiet --locked --root "$tools" "cargo-deny@$version"
  printf '    cargo-deny: %ss\n' "$(( $(date +%s) - start ))"
fi
printf '==> cargo deny check licenses bans sources\n'
"$deny" deny --locked check --hide-inclusion-graph licenses bans sources
