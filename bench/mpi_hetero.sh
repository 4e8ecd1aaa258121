#!/usr/bin/env bash
# A heterogeneous cluster, simulated: rank 0 has a device four times as fast as the other ranks'
# (80 against 20 GFLOP/s, timing only, in host memory); `hcr-mpi run` (f64, tiles of 256) maps the
# tiles 2-D block-cyclic, then by measured throughput (hcr::mpi::measure_throughput +
# Cluster::distribute_weighted), runs interleaved. Prints each run, the medians and
# cyclic/throughput (above 1: the throughput mapping is faster), for gemm and Cholesky.
#
#   bash bench/mpi_hetero.sh [--np 4] [--size 4096] [--runs 3] [--hcr-mpi build/bin/hcr-mpi]
set -euo pipefail
np=4 size=4096 runs=3
hcr=build/bin/hcr-mpi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --hcr-mpi) hcr=$2; shift 2 ;;
    *) echo "mpi_hetero.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$hcr" ]] || { echo "mpi_hetero.sh: no hcr-mpi at $hcr" >&2; exit 2; }
(( np >= 2 )) || { echo "mpi_hetero.sh: --np must be at least 2" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for speed in 80 20; do
  printf '[[backend]]\nname = "sim"\ncompute = false\ntime_scale = 1\n[[backend.device]]\nname = "node"\ngflops = %s\nhost_memory = true\n' \
    "$speed" > "$dir/sim$speed.toml"
done
once() {  # op mapping -> seconds
  local args=(run --op "$1" --dtype f64 --size "$size" --tile 256 --mapping "$2" --no-check)
  mpirun --oversubscribe --bind-to none --mca btl self,vader \
    -np 1 "$hcr" "${args[@]}" --config "$dir/sim80.toml" : \
    -np $((np - 1)) "$hcr" "${args[@]}" --config "$dir/sim20.toml" | awk '/^time: best/ {print $3}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "$np ranks: rank 0 at 80 GFLOP/s, the others at 20 (simulated); f64, n=$size, tiles of 256"
for op in gemm potrf; do
  c=() t=()
  for ((i = 1; i <= runs; ++i)); do
    a=$(once "$op" cyclic); b=$(once "$op" throughput)
    printf '%s run %d: block-cyclic %.4f s   by throughput %.4f s\n' "$op" "$i" "$a" "$b"
    c+=("$a") t+=("$b")
  done
  awk -v op="$op" -v c="$(median "${c[@]}")" -v t="$(median "${t[@]}")" \
    'BEGIN {printf "%s median: block-cyclic %.4f s, by throughput %.4f s: %.2fx\n", op, c, t, c / t}'
done
