#!/usr/bin/env bash
# Weak scaling of hcr::mpi on simulated devices: `hcr-mpi run --op gemm` (f64, tiles of 256) at 1,
# 2, 4 and 8 ranks on this machine (loopback shared memory), each rank with one simulated device
# (timing only, 20 GFLOP/s in host memory: a tile gemm holds it 1.7 ms, long beside the runtime's
# and the layer's overheads) and a grid of tiles that gives every rank the same work: 8^3 tile
# gemms on 1 rank, then 10^3 / 2, 12^3 / 4 and 16^3 / 8 (500, 432 and 512 per rank, 2-D
# block-cyclic over 1x2, 2x2 and 2x4 ranks, balanced). Parallel efficiency: tile gemms per second
# per rank, against one rank's. Medians of --runs runs (hcr-mpi's best of 2 repetitions each).
#
#   bash bench/mpi_weak_scaling.sh [--runs 3] [--hcr-mpi build/bin/hcr-mpi]
set -euo pipefail
runs=3
hcr=build/bin/hcr-mpi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --hcr-mpi) hcr=$2; shift 2 ;;
    *) echo "mpi_weak_scaling.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$hcr" ]] || { echo "mpi_weak_scaling.sh: no hcr-mpi at $hcr" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
cat > "$cfg" <<TOML
[[backend]]
name = "sim"
compute = false
time_scale = 1
[[backend.device]]
name = "node"
gflops = 20
host_memory = true
TOML
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
base=""
printf '%5s %5s %10s %12s %10s\n' ranks grid "time (s)" "gemms/rank" efficiency
for spec in "1 8 1x1" "2 10 1x2" "4 12 2x2" "8 16 2x4"; do
  read -r np g grid <<< "$spec"
  ts=()
  for ((i = 0; i < runs; ++i)); do
    t=$(mpirun --oversubscribe --bind-to none -np "$np" --mca btl self,vader \
          "$hcr" run --op gemm --dtype f64 --size $((g * 256)) --tile 256 --grid "$grid" \
          --repeat 2 --no-check --config "$cfg" | awk '/^time: best/ {print $3}')
    ts+=("$t")
  done
  t=$(median "${ts[@]}")
  per_rank=$(( g * g * g / np ))
  rate=$(awk -v n="$per_rank" -v t="$t" 'BEGIN {print n / t}')
  [[ -n "$base" ]] || base=$rate
  awk -v np="$np" -v g="$g" -v t="$t" -v n="$per_rank" -v r="$rate" -v b="$base" \
    'BEGIN {printf "%5d %5d %10.4f %12d %10.3f\n", np, g, t, n, r / b}'
done
