#!/usr/bin/env bash
# Packs what the GPU checks need from this machine's Release build (build/, configured with the
# CUDA toolkit) into .gpu-kit/: the binaries and plugins under the same paths as in build/ (their
# run paths and compiled-in plugin directories name /work/main/build), and the shared libraries
# they need that a bare GPU machine lacks (oneTBB, TOML++, Google Benchmark, libstdc++ for older
# systems). On the GPU machine, bench/gpu_kit_run.sh OUTDIR links /work/main/build to it and runs
# the checks. Unlike bench/gpu_run.sh, nothing is built there: the machine's time goes to the GPU.
#
#   cmake --build build && bash bench/gpu_kit.sh     # here; then carry .gpu-kit to the GPU machine
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
b=build
[ -f $b/lib/hcr/plugins/libhcr-cuda.so ] || { echo "no $b/lib/hcr/plugins/libhcr-cuda.so: build with the CUDA toolkit first" >&2; exit 1; }
kit=.gpu-kit
rm -rf $kit
mkdir -p $kit/build/bin $kit/build/lib/hcr/plugins $kit/build/tests/backends/cuda $kit/deps $kit/compat
for f in hcr cuda_backend_test cuda_bench cuda_graph_bench nvml_energy_bench; do cp $b/bin/$f $kit/build/bin/; done
cp -a $b/lib/libhcr.so* $b/lib/libhcr_linalg.so* $kit/build/lib/
cp $b/lib/hcr/plugins/libhcr-cuda.so $b/lib/hcr/plugins/libhcr-cpu.so $kit/build/lib/hcr/plugins/
for d in fake-plugin fake-incomplete fake-lib; do  # the FakeCuda* tests' stand-in libraries
  mkdir -p $kit/build/tests/backends/cuda/$d
  cp -a $b/tests/backends/cuda/$d/*.so* $kit/build/tests/backends/cuda/$d/
done
L=/usr/lib/x86_64-linux-gnu
cp -L $L/libtbb.so.12 $L/libtomlplusplus.so.3 $L/libbenchmark.so.1debian $kit/deps/
cp -L $L/libstdc++.so.6 $kit/compat/
du -sh $kit
