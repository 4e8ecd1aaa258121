#!/usr/bin/env bash
# The scheduler's objectives side by side on a simulated machine whose fastest device is not the
# most efficient: a 300 W device (50 W idle) next to a 30 W one (5 W idle) at a quarter of its
# speed, both in host memory, timing only. For tiled gemm and tiled Cholesky, `hcr run` under peft
# with objective time, energy (max_slowdown 1.1 and 1.25) and StarPU's weighted form at several
# gamma: the job's best time and its modelled joules (idle draws included, over the job's wall
# time), each after warm-up repetitions that teach the cost model both devices. Energy figures are
# the sim's power model; times are wall times of the simulated (time_scale) machine.
#
#   bash bench/energy_objectives.sh [--hcr build/bin/hcr] [--size 4096] [--repeat 3]
set -euo pipefail
hcr=build/bin/hcr
size=4096
repeat=3
while (($#)); do
  case $1 in
    --hcr) hcr=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
machine() {  # $1: the [scheduler] lines
  cat <<TOML
[scheduler]
policy = "peft"
model_dir = "$work/models"
$1
[[backend]]
name = "sim"
compute = false
time_scale = 20
[[backend.device]]
name = "hungry"
gflops = 4000
host_memory = true
idle_watts = 50
busy_watts = 300
[[backend.device]]
name = "frugal"
gflops = 1000
host_memory = true
idle_watts = 5
busy_watts = 30
TOML
}
run() {  # $1 op, $2 tile, $3 label, $4 scheduler lines
  machine "$4" >"$work/m.toml"
  out=$("$hcr" run --op "$1" --size "$size" --tile "$2" --repeat "$repeat" --no-check \
        --no-progress --config "$work/m.toml")
  best=$(sed -n 's/^time: best \([0-9.]*\) s.*/\1/p' <<<"$out")
  joules=$(sed -n 's/^  total *\([0-9.]*\) J.*/\1/p' <<<"$out")
  # Per device line: ... tasks busy busy% <bytes in: number unit> <bytes out: number unit>.
  tasks=$(awk '/^per device/{f=1;next} f&&/^  #/{printf "%s ", $(NF-6)} /^$/{if(f)exit}' <<<"$out")
  printf '  %-34s best %8.4f s   %9.2f J per %d runs   tasks per device: %s\n' \
    "$3" "$best" "$joules" "$repeat" "$tasks"
  echo "$3|$best|$joules" >>"$work/results"
}
for job in "gemm 512" "potrf 512"; do
  set -- $job
  rm -rf "$work/models" "$work/results"
  echo "$1, n = $size, tile $2:"
  run "$1" "$2" "warm-up (time)" 'objective = "time"' >/dev/null
  run "$1" "$2" "time" 'objective = "time"'
  run "$1" "$2" "energy, max_slowdown 1.1" $'objective = "energy"\nmax_slowdown = 1.1'
  run "$1" "$2" "energy, max_slowdown 1.25" $'objective = "energy"\nmax_slowdown = 1.25'
  for g in 1e-5 1e-4 1e-3; do
    run "$1" "$2" "weighted, gamma $g" $'objective = "weighted"\ngamma = '"$g"
  done
  grep -v warm "$work/results" | awk -F'|' 'NR==1{t=$2; j=$3}
    NR>1{printf "  %-34s makespan %.3f, energy %.3f (of objective time)\n", $1, $2/t, $3/j}'
done
