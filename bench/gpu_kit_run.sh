#!/usr/bin/env bash
# Runs the GPU checks from .gpu-kit/ (made here by bench/gpu_kit.sh) on a machine with an NVIDIA
# GPU and a CUDA 13 toolkit, writing seven files to OUTDIR: summary.txt (read first), machine.txt,
# tests.log (the CudaGpu* tests, which must find the GPU), cuda_bench.txt (cuBLAS/cuSOLVER ratios,
# bf16, copies, GPU+CPU tiled gemm), graphs.txt (a chain of 1,000 small kernels launched one by one
# against the same chain as one device graph, at the plugin's table and through hcr::Graph),
# nvml.txt (the NVML meter over a 10 s gemm load) and potrf.txt (hcr's tiled Cholesky on GPU+CPU
# and on the GPU alone against one cuSOLVER potrf).
#
#   bash bench/gpu_kit_run.sh OUTDIR
#
# HCR_KIT_STEPS picks steps (default "tests nvml graphs bench potrf"); HCR_KIT_BENCH_FILTER is
# cuda_bench's --benchmark_filter for the bench step (default: all);
# HCR_KIT_POTRF_N (32768), HCR_KIT_POTRF_TILES ("2048") and HCR_KIT_CHECK_N
# (8192) size the Cholesky runs.
set -uo pipefail
out=$1
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
kit=$repo/.gpu-kit
[ -d "$kit/build/bin" ] || { echo "no $kit: run bench/gpu_kit.sh on the development machine" >&2; exit 1; }
# The kit's paths name /work/main/build: a link to the kit there (a real build folder, as on the
# development machine, is used as it is).
if [ ! -d /work/main/build ] || [ -L /work/main/build ]; then
  mkdir -p /work/main && ln -sfn "$kit/build" /work/main/build
fi
B=/work/main/build
export LD_LIBRARY_PATH="$B/lib:$kit/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The toolkit's libraries only for the benchmarks, which link cuBLAS and cuSOLVER: on the tests'
# path they would come before the fake plugin's run path and it would open the real ones.
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d $d ] && cuda_lib="$cuda_lib:$d"; done
sys_cxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')
if [ -z "$sys_cxx" ] || ! grep -q GLIBCXX_3.4.30 "$sys_cxx"; then export LD_LIBRARY_PATH="$kit/compat:$LD_LIBRARY_PATH"; fi
export HCR_CUDA_TESTS_REQUIRE_GPU=1 HOME=/tmp/hcr-home
s=$out/summary.txt
say() { echo "== $*" | tee -a "$s"; }
{ date -u; nvidia-smi; nvidia-smi -q -d POWER,CLOCK | head -60; nproc; free -g; ldd --version | head -1; } > "$out/machine.txt" 2>&1
say "$(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"

steps=${HCR_KIT_STEPS:-tests nvml graphs bench potrf}
step() { [[ " $steps " == *" $1 "* ]]; }

if step tests; then
say "CudaGpu tests"
# Two processes: once a real cuBLAS or NVML is loaded, the fake plugin's dlopen would get it.
: > "$out/tests.log"
for filter in 'CudaPlugin.*:CudaGpu*' 'Fake*'; do
  timeout 150 "$B/bin/cuda_backend_test" --gtest_filter="$filter" >> "$out/tests.log" 2>&1
  say "$filter: exit $?"
done
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$out/tests.log" | head -30 | tee -a "$s"
fi
if step nvml; then
say "nvml energy (10 s gemm)"
LD_LIBRARY_PATH="$LD_LIBRARY_PATH$cuda_lib" timeout 60 "$B/bin/nvml_energy_bench" > "$out/nvml.txt" 2>&1
say "exit $?"; tail -4 "$out/nvml.txt" | tee -a "$s"

fi
if step graphs; then
say "device graphs: 1,000-kernel chain, one by one against one graph (launches_per_s, tasks_per_s)"
LD_LIBRARY_PATH="$LD_LIBRARY_PATH$cuda_lib" timeout 60 "$B/bin/cuda_graph_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  > "$out/graphs.txt" 2>&1
say "exit $?"; grep -E "_median|ERROR" "$out/graphs.txt" | tee -a "$s"
fi
if step bench; then
say "cuda_bench"
LD_LIBRARY_PATH="$LD_LIBRARY_PATH$cuda_lib" timeout 240 "$B/bin/cuda_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.2 --benchmark_filter="${HCR_KIT_BENCH_FILTER:-all}" > "$out/cuda_bench.txt" 2>&1
say "exit $?"; grep -E "_median|ERROR" "$out/cuda_bench.txt" | tee -a "$s"

fi
if step potrf; then
N=${HCR_KIT_POTRF_N:-32768}
say "tiled Cholesky f64 (hcr run) against cuSOLVER"
cat > /tmp/gpu_cpu.toml << TOML
[runtime]
plugin_paths = ["$B/lib/hcr/plugins"]
[scheduler]
model_dir = "/tmp/hcr-models"
[[backend]]
name = "cuda"
[[backend]]
name = "cpu"
TOML
printf '[runtime]\nplugin_paths = ["%s"]\n[scheduler]\nmodel_dir = "/tmp/hcr-models"\n[[backend]]\nname = "cuda"\n' "$B/lib/hcr/plugins" > /tmp/gpu.toml
{
  echo "--- check, GPU+CPU, n=${HCR_KIT_CHECK_N:-8192}"
  timeout 60 "$B/bin/hcr" run --config /tmp/gpu_cpu.toml --op potrf --dtype f64 --size ${HCR_KIT_CHECK_N:-8192} --tile 1024 --repeat 2 --no-progress
  for t in ${HCR_KIT_POTRF_TILES:-2048}; do
    for cfg in gpu_cpu gpu; do
      echo "--- $cfg, n=$N tile $t"
      timeout 120 "$B/bin/hcr" run --config /tmp/$cfg.toml --op potrf --dtype f64 --size $N --tile $t --repeat 3 --no-check --no-progress
    done
  done
  echo "--- cuSOLVER dpotrf alone"
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH$cuda_lib" HCR_CUDA_BENCH_POTRF_N=$N timeout 90 "$B/bin/cuda_bench" --benchmark_filter=BM_Potrf --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
} > "$out/potrf.txt" 2>&1
grep -E "^job|best|GFLOP|check|_median|^---|^  #" "$out/potrf.txt" | tee -a "$s"
fi
say done
