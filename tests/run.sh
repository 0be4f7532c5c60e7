#!/usr/bin/env bash
# The test command (README "Run the tests"). Installs what a fresh machine lacks, then runs
# the format and lint gates and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# gcc and make, for the C parts of dependencies (ring; jemalloc's configure-and-make build).
if ! command -v make >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then
  log "installing gcc and make (Debian)"
  apt-get update -qq && apt-get install -y -qq gcc make >/dev/null
fi

# The real Kubernetes control plane and clients (etcd, kube-apiserver, kubectl, helm), built from
# their Go modules at the versions tests/tools/go.mod pins, into target/tools/bin/ (only what is
# missing; KUBEBUILDER_ASSETS is honoured). The tests run the product against them.
if ! command -v go >/dev/null 2>&1; then
  echo "tests/run.sh: Go is needed to build the real Kubernetes binaries (tests/tools/build.sh)" >&2
  exit 1
fi
bash tests/tools/build.sh
export PATH="$PWD/target/tools/bin:$PATH"

# buildah and umoci, for the container image test (deploy/images.sh builds, umoci unpacks).
if ! command -v buildah >/dev/null 2>&1 || ! command -v umoci >/dev/null 2>&1; then
  log "installing buildah and umoci (Debian)"
  apt-get update -qq && apt-get install -y -qq buildah umoci >/dev/null
fi

# The official Azure SDK for Python, to check the ARM simulator against a second client.
venv=target/pyenv
if ! "$venv/bin/python" -c 'import azure.mgmt.network, azure.identity' >/dev/null 2>&1; then
  log "installing the Azure SDK for Python into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/arm-sim/python/requirements.txt
fi
export CUTOVER_PYTHON="$PWD/$venv/bin/python"

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "cargo test"
cargo test --workspace --locked
