#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer on stable Rust.
#   tests/fuzz/run.sh <target> [seconds] [extra libFuzzer flags...]
#   tests/fuzz/run.sh all [seconds]     # each target in turn
# Targets: see cutover_fuzz::TARGETS (tests/fuzz/src/lib.rs). Corpora live in
# $CARGO_TARGET_DIR (default target)/fuzz/corpus/<target> (seeded from the built-in seeds); crashes in
# .../fuzz/crashes.
# Needs a C++ compiler (g++) for libFuzzer itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: tests/fuzz/run.sh <target|all> [seconds]}
secs=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))

tdir=${CARGO_TARGET_DIR:-target}
bin=$tdir/debug/cutover-libfuzzer

targets=("$target")
if [[ $target == all ]]; then
  targets=(azure_json arm_error retry_after arm_pools spot_notice kube_node kube_event rpc)
fi
# Seeds first: write-seeds is built without instrumentation, so building it after the fuzzer
# would make the next run rebuild the instrumented workspace crates.
for t in "${targets[@]}"; do
  corpus=$tdir/fuzz/corpus/$t
  mkdir -p "$corpus" "$tdir/fuzz/crashes/$t"
  if [[ -z $(ls -A "$corpus") ]]; then
    cargo run -q -p cutover-fuzz --example write-seeds -- "$t" "$corpus"
  fi
done
RUSTC_WORKSPACE_WRAPPER="$PWD/tests/fuzz/instrument.sh" \
  cargo build -q -p cutover-fuzz --features libfuzzer --bin cutover-libfuzzer
for t in "${targets[@]}"; do
  corpus=$tdir/fuzz/corpus/$t
  crashes=$tdir/fuzz/crashes/$t
  echo "==> $t for ${secs}s"
  CUTOVER_FUZZ_TARGET=$t "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -artifact_prefix="$crashes/" -print_final_stats=1 "$@" "$corpus"
done
