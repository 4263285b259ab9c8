#!/usr/bin/env bash
# Sets up agentkv and runs every test: the unit, model and server tests (ctest), a Release build
# of the server and the CUDA backend with warnings as errors, a ThreadSanitizer run of the engine,
# KV and server tests, then each libFuzzer target under ASan and UBSan for a bounded time
# (AGENTKV_FUZZ_SECONDS each, default 40). Any missing prerequisite (node/npm, the CUDA toolkit,
# clang) fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# CI builds treat warnings as errors (users' builds do not: AGENTKV_WERROR defaults to OFF).
export AGENTKV_WERROR=ON
# Prints each stage's start with the minutes spent so far (CI keeps the whole run under 45).
SECONDS=0
stage() { echo "== $1 ($((SECONDS / 60)) min in)"; }
stage "setup and build"
scripts/setup.sh
# Headless Chromium for the dashboard's browser test (tests/app/dashboard_browser.py).
if ! command -v chromium >/dev/null; then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"

jobs="$(nproc)"
stage "ctest"
ctest --test-dir build --output-on-failure -j"$jobs"

# One Release build (GCC -O3, warnings as errors) of the server and the CUDA backend: the CUDA
# code must compile (its tests report Skipped without a GPU), and -O3 brings warnings -O2 does
# not (users build Release without -Werror, which AGENTKV_WERROR leaves off by default). A
# machine without the toolkit fails here unless AGENTKV_CUDA_BUILD=OFF says to leave CUDA out.
cuda=ON
release_targets=(agentkv cuda_parity_test)
if [[ "${AGENTKV_CUDA_BUILD:-ON}" == OFF ]]; then
  cuda=OFF
  release_targets=(agentkv)
else
  [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "FAIL: no CUDA toolkit in /usr/local/cuda (AGENTKV_CUDA_BUILD=OFF skips the CUDA build)"; exit 1; }
fi
stage "Release build (CUDA $cuda)"
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DAGENTKV_CUDA=$cuda -DAGENTKV_WERROR=ON \
  -DAGENTKV_BENCH=OFF >/dev/null
cmake --build build-release -j"$jobs" --target "${release_targets[@]}"
if [[ $cuda == ON ]]; then ctest --test-dir build-release --output-on-failure -L cuda; fi

# ThreadSanitizer: the engine, KV and server tests (the engine thread, HTTP threads, the
# tiers' IO threads) in a clang build of their own. Not here: disk_store_crash_test (forks a
# threaded child, which TSan refuses) and block_codec_test (single-threaded numerics).
stage "ThreadSanitizer"
tsan_tests=(kv_test disk_store_test disk_budget_test engine_unit_test engine_model_test agent_memory_test
  server_unit_test retention_policy_test remote_store_test restorer_test)
CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTKV_TSAN=ON \
  -DAGENTKV_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}"
tsan_regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
# OpenBLAS's own threads are not instrumented: one thread keeps its hand-offs out of the report.
OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan -R "$tsan_regex" --output-on-failure -j"$jobs"

stage "fuzzing"
# Fuzzing: a clang build with sanitizers, separate from the main build.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAGENTKV_FUZZ=ON -DAGENTKV_TESTS=OFF -DAGENTKV_BENCH=OFF -DAGENTKV_WERROR=ON >/dev/null
fuzz_targets=()
for src in fuzz/*_fuzz.cpp; do fuzz_targets+=("$(basename "$src" .cpp)"); done
cmake --build build-fuzz -j"$jobs" --target "${fuzz_targets[@]}"
seconds="${AGENTKV_FUZZ_SECONDS:-40}"
for name in "${fuzz_targets[@]}"; do
  fuzzer="build-fuzz/fuzz/$name"
  corpus="build-fuzz/corpus/$name"
  mkdir -p "$corpus"
  echo "fuzzing $name for ${seconds}s"
  seeds=()
  [[ -d "fuzz/seeds/$name" ]] && seeds=("fuzz/seeds/$name")
  log="build-fuzz/$name.log"
  if ! "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/$name-" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    # The finding (stack, input as hex and base64) comes before the final stats.
    grep -v -E '^(#[0-9]+|\s+NEW_FUNC)' "$log" | tail -n 80
    echo "$name found a failure: the input is in build-fuzz/$name-*" >&2
    exit 1
  fi
  tail -n 5 "$log"
done
stage "done"
echo "all tests passed"
