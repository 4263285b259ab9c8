#!/usr/bin/env bash
# Sets up agentkv and runs every test: the unit, model and server tests (ctest), then each
# libFuzzer target under ASan and UBSan for a bounded time (AGENTKV_FUZZ_SECONDS, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
# CI builds treat warnings as errors (users' builds do not: AGENTKV_WERROR defaults to OFF).
export AGENTKV_WERROR=ON
scripts/setup.sh
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"

jobs="$(nproc)"
ctest --test-dir build --output-on-failure -j"$jobs"

# The CUDA backend compiles everywhere the toolkit is (its tests skip themselves without a GPU).
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTKV_CUDA=ON \
    -DAGENTKV_BENCH=OFF -DAGENTKV_WERROR=ON >/dev/null
  cmake --build build-cuda -j"$jobs" --target agentkv cuda_parity_test
  ctest --test-dir build-cuda --output-on-failure -L cuda
fi

# Fuzzing: a clang build with sanitizers, separate from the main build.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAGENTKV_FUZZ=ON -DAGENTKV_TESTS=OFF -DAGENTKV_BENCH=OFF -DAGENTKV_WERROR=ON >/dev/null
fuzz_targets=()
for src in fuzz/*_fuzz.cpp; do fuzz_targets+=("$(basename "$src" .cpp)"); done
cmake --build build-fuzz -j"$jobs" --target "${fuzz_targets[@]}"
seconds="${AGENTKV_FUZZ_SECONDS:-60}"
for name in "${fuzz_targets[@]}"; do
  fuzzer="build-fuzz/fuzz/$name"
  corpus="build-fuzz/corpus/$name"
  mkdir -p "$corpus"
  echo "fuzzing $name for ${seconds}s"
  seeds=()
  [[ -d "fuzz/seeds/$name" ]] && seeds=("fuzz/seeds/$name")
  "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/" "$corpus" "${seeds[@]}" 2>&1 | tail -n 5
done
echo "all tests passed"
