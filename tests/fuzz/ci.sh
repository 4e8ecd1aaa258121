#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang in their own build directory and runs each
# over the committed corpus for a bounded time. Exits non-zero on any finding (crash, undefined
# behaviour, leak, failed property, an input slower than 10 s or a malloc over 2 GiB); the input is
# left in BUILD_DIR/fuzz/artifacts.
#
#   bash tests/fuzz/ci.sh [BUILD_DIR]     default: build-fuzz
#
# HCR_FUZZ_SECONDS: seconds per fuzzer (default 60). Longer runs by hand: see tests/fuzz/README.md.
# Needs clang and its libFuzzer runtime (Debian 12: clang-14 libclang-rt-14-dev; llvm-14 for
# symbolized stack traces), ninja and the packages tools/setup.sh installs.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(realpath -m "${1:-$src/build-fuzz}")"
seconds="${HCR_FUZZ_SECONDS:-60}"

cxx="" cc=""
for v in -14 ""; do
  if command -v "clang++$v" > /dev/null && command -v "clang$v" > /dev/null; then
    cxx="clang++$v" cc="clang$v"
    break
  fi
done
if [ -z "$cxx" ]; then
  echo "tests/fuzz/ci.sh: no clang++ (Debian 12: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

echo "== fuzzers: configuring and building in $build ($cxx)"
mkdir -p "$build"
# Only the fuzz targets are built; they compile the loaders' sources themselves.
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DHCR_BUILD_FUZZERS=ON \
  -DHCR_BUILD_TESTS=OFF -DHCR_BUILD_BENCH=OFF -DHCR_BUILD_SAMPLES=OFF -DHCR_BUILD_TOOLS=OFF \
  -DHCR_WITH_CUDA=OFF -DHCR_WITH_OPENCL=OFF > "$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  exit 1
}
grep "hcr: fuzzers" "$build/configure.log" || true
if ! cmake --build "$build" --target config_fuzz cost_model_fuzz; then
  echo "tests/fuzz/ci.sh: building the fuzzers failed (libFuzzer runtime: libclang-rt-14-dev)" >&2
  exit 1
fi

export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# A home of their own, as every test has: nothing the loaders read or write is the user's.
export HOME="$build/fuzz/home" XDG_CACHE_HOME="$build/fuzz/home/.cache"
mkdir -p "$XDG_CACHE_HOME"
failed=()
for name in config cost_model; do
  work="$build/fuzz/$name"  # what the fuzzer adds; the committed corpus stays as it is
  artifacts="$build/fuzz/artifacts"
  log="$build/fuzz/$name.log"
  mkdir -p "$work" "$artifacts"
  echo "== fuzzing ${name}_fuzz for ${seconds} s"
  if "$build/bin/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -print_final_stats=1 -dict="$src/tests/fuzz/$name.dict" \
    -artifact_prefix="$artifacts/$name-" "$work" "$src/tests/fuzz/corpus/$name" > "$log" 2>&1; then
    grep -E "^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)" "$log" || true
  else
    tail -n 60 "$log"
    echo "== ${name}_fuzz: FINDING (log: $log, inputs: $artifacts)" >&2
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "tests/fuzz/ci.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzzers: no findings"
