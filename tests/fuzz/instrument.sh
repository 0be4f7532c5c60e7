#!/bin/sh
# RUSTC_WORKSPACE_WRAPPER for tests/fuzz/run.sh: adds libFuzzer's coverage instrumentation
# (stable rustc codegen flags, no nightly needed) to the workspace crates only, so the
# dependencies are reused from the normal debug build.
exec "$@" -Cpasses=sancov-module \
  -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
  -Cllvm-args=-sanitizer-coverage-pc-table \
  -Cllvm-args=-sanitizer-coverage-trace-compares
