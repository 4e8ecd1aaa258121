#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, a CUDA toolkit (12.0 or newer), a C++20 compiler and CMake
# 3.25 or newer — but none of hcr's other dependencies installed: builds hcr with the CUDA backend
# for sm_90, runs the CUDA tests (which must find the GPU), the whole test suite and the CUDA
# benchmarks, and writes everything to OUTDIR.
#
#   bash bench/gpu_run.sh OUTDIR
#
# The dependencies come from .gpu-deps/ at the repository root, made on the development machine
# by `bash bench/gpu_pack_deps.sh` and copied here with the repository. Afterwards send back
# OUTDIR: summary.txt first, then machine.txt, cuda_tests.log, ctest.log, cuda_bench.txt/.json,
# graphs.txt.
# Environment: HCR_GPU_BUILD_DIR (default build-gpu), HCR_CUDA_ARCH (default 90), CUDACXX (nvcc),
# HCR_GPU_RUN_ALLOW_NO_GPU=1 (exercise the script where there is no GPU: tests skip, not fail).
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: bash bench/gpu_run.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
deps=$repo/.gpu-deps
arch=x86_64-linux-gnu
L=$deps/lib/$arch
build=${HCR_GPU_BUILD_DIR:-build-gpu}
jobs=$(nproc 2> /dev/null || echo 4)
summary=$out/summary.txt
: > "$summary"

say() { echo "== $*" | tee -a "$summary"; }
die() {
  say "FAILED: $*"
  exit 1
}

# --- what this machine is -----------------------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2> /dev/null) ($(git -C "$repo" status --porcelain 2> /dev/null | wc -l) changed files)"
  uname -a
  cat /etc/os-release 2> /dev/null | head -2
  echo "cores: $jobs"
  free -g 2> /dev/null | head -2
  ldd --version 2> /dev/null | head -1
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi
    nvidia-smi topo -m
  else
    echo "no nvidia-smi on PATH"
  fi
} > "$out/machine.txt" 2>&1

# --- tools --------------------------------------------------------------------------------------
[ -d "$deps" ] || die "no $deps: run 'bash bench/gpu_pack_deps.sh' on the development machine and copy .gpu-deps here"
nvcc=${CUDACXX:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || die "no nvcc (put it on PATH or set CUDACXX)"
command -v cmake > /dev/null || die "no cmake (3.25 or newer is needed)"
cmake_version=$(cmake --version | head -1 | awk '{print $3}')
if [ "$(printf '%s\n' 3.25 "$cmake_version" | sort -V | head -1)" != 3.25 ]; then
  die "cmake $cmake_version is older than 3.25 (a newer one: pip install cmake, or the cmake.org tarball)"
fi
cxx=${CXX:-$(command -v g++ || command -v c++ || true)}
[ -n "$cxx" ] || die "no C++ compiler (g++ 11 or newer)"
generator="Unix Makefiles"
command -v ninja > /dev/null && generator=Ninja
{
  echo "nvcc: $("$nvcc" --version | tail -2 | head -1)"
  echo "cmake: $cmake_version ($generator)"
  echo "c++: $("$cxx" --version | head -1)"
} | tee -a "$out/machine.txt" >> "$summary"

# The packed libraries were built on Debian 12: they need glibc >= 2.34 and GCC 12's libstdc++.
glibc=$(ldd --version 2> /dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
if [ -n "$glibc" ] && [ "$(printf '%s\n' 2.34 "$glibc" | sort -V | head -1)" != 2.34 ]; then
  die "glibc $glibc is older than 2.34, which the packed libraries need"
fi
export LD_LIBRARY_PATH="$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
libstdcxx=$("$cxx" -print-file-name=libstdc++.so.6 2> /dev/null)
if [ -f "$libstdcxx" ] && ! grep -q GLIBCXX_3.4.30 "$libstdcxx" 2> /dev/null; then
  say "note: this compiler's libstdc++ predates GCC 12: using the packed one at run time"
  export LD_LIBRARY_PATH="$deps/compat:$LD_LIBRARY_PATH"
fi

# Package locations, also as environment variables so that the install test's own CMake runs
# (tests/install) find them too.
export TBB_DIR=$L/cmake/TBB GTest_DIR=$L/cmake/GTest benchmark_DIR=$L/cmake/benchmark
export tomlplusplus_DIR=$L/cmake/tomlplusplus Boost_DIR=$L/cmake/Boost-1.74.0
export OpenBLAS_DIR=$L/cmake/openblas CMAKE_PREFIX_PATH=$deps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}

# --- build --------------------------------------------------------------------------------------
say "configuring in $build (CUDA architecture ${HCR_CUDA_ARCH:-90})"
cmake -S . -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DHCR_CUDA_ARCHITECTURES="${HCR_CUDA_ARCH:-90}" \
  -DTBB_DIR="$TBB_DIR" -DGTest_DIR="$GTest_DIR" -Dbenchmark_DIR="$benchmark_DIR" \
  -Dtomlplusplus_DIR="$tomlplusplus_DIR" -DBoost_DIR="$Boost_DIR" -DOpenBLAS_DIR="$OpenBLAS_DIR" \
  > "$out/configure.log" 2>&1 || die "configure (see configure.log)"
grep -q "hcr: CUDA backend: toolkit" "$out/configure.log" ||
  die "the CUDA backend was not configured: $(grep 'CUDA backend' "$out/configure.log")"
say "building with $jobs jobs"
cmake --build "$build" -j "$jobs" > "$out/build.log" 2>&1 || die "build (see build.log)"

# --- run ----------------------------------------------------------------------------------------
require=1
[ "${HCR_GPU_RUN_ALLOW_NO_GPU:-0}" = 1 ] && require=0
status=0

say "hcr devices"
HCR_LOG=info "$build/bin/hcr" devices > "$out/devices.txt" 2>&1
grep -E "cuda|gpu" "$out/devices.txt" | tee -a "$summary"

say "CUDA backend tests (they must find the GPU: HCR_CUDA_TESTS_REQUIRE_GPU=$require)"
HCR_CUDA_TESTS_REQUIRE_GPU=$require "$build/bin/cuda_backend_test" \
  --gtest_output="xml:$out/cuda_tests.xml" > "$out/cuda_tests.log" 2>&1 || status=1
grep -E "^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]+ test" "$out/cuda_tests.log" |
  tee -a "$summary"

say "the whole suite (ctest)"
(cd "$build" && HCR_CUDA_TESTS_REQUIRE_GPU=$require ctest --output-on-failure -j "$jobs") \
  > "$out/ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted)\)" "$out/ctest.log" |
  tee -a "$summary"

say "CUDA benchmark (a few minutes)"
"$build/bin/cuda_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json \
  > "$out/cuda_bench.txt" 2>&1 || status=1
grep -E "_median|ERROR" "$out/cuda_bench.txt" | awk '!seen[$0]++' | tee -a "$summary"
grep -q "ERROR OCCURRED" "$out/cuda_bench.txt" && [ "$require" = 1 ] && status=1

say "device graphs: 1,000-kernel chain, one by one against one graph (cuda_graph_bench)"
"$build/bin/cuda_graph_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  > "$out/graphs.txt" 2>&1 || status=1
grep -E "_median|ERROR" "$out/graphs.txt" | awk '!seen[$0]++' | tee -a "$summary"
grep -q "ERROR OCCURRED" "$out/graphs.txt" && [ "$require" = 1 ] && status=1

if [ $status -ne 0 ]; then
  say "done, with failures: results in $out"
else
  say "done: results in $out"
fi
exit $status
