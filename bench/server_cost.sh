#!/usr/bin/env bash
# server_cost.sh: instructions per call that rpcguard's server interceptor
# adds to a server call on the no-failure path (bench/server_interceptor_cost.cc).
#
#   bench/server_cost.sh [--calls=N] [--runs=R]
#
# Runs //bench:server_interceptor_cost (built -c opt) under callgrind with
# no server interceptor (0), rpcguard's (1) and a pass-through one (2), R
# times each, alternating, and prints the instructions per call of each run
# and the differences of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."

calls=2000
runs=3
for arg in "$@"; do
  case "$arg" in
    --calls=*) calls=${arg#--calls=} ;;
    --runs=*) runs=${arg#--runs=} ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done
./bazelw build -c opt //bench:server_interceptor_cost >&2
bin=bazel-bin/bench/server_interceptor_cost
out=$(mktemp -d)
declare -A per_call
for r in $(seq 1 "$runs"); do
  for on in 0 1 2; do
    valgrind --tool=callgrind --dump-instr=no \
      --callgrind-out-file="$out/run$r-$on.%p" "$bin" --interceptor=$on \
      --calls="$calls" >/dev/null 2>&1
    # The dump of the measured calls (CALLGRIND_DUMP_STATS_AT), not the
    # final one at exit.
    f=$(grep -l '^desc: Trigger: Client Request' "$out"/run$r-$on.* | head -1)
    total=$(grep -m1 '^summary:' "$f" | awk '{print $2}')
    per_call[$r-$on]=$((total / calls))
    echo "run $r interceptor=$on: ${per_call[$r-$on]} instructions/call"
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
off=$(for r in $(seq 1 "$runs"); do echo "${per_call[$r-0]}"; done | median)
on=$(for r in $(seq 1 "$runs"); do echo "${per_call[$r-1]}"; done | median)
pt=$(for r in $(seq 1 "$runs"); do echo "${per_call[$r-2]}"; done | median)
echo "medians: none $off, pass-through $pt, rpcguard $on instructions/call"
echo "rpcguard's server interceptor: $((on - off)) over none, $((on - pt)) over a pass-through one"
rm -rf "$out"
