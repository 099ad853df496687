#!/usr/bin/env bash
# callgrind_guard.sh: fails when rpcguard's no-failure path grows against
# its floor. CI runs it (.ci/run); run it yourself before sending a change
# that touches a call's path:
#
#   bench/callgrind_guard.sh [--mode=fastbuild|opt] [--calls=N]
#                            [--stream_calls=N] [--runs=N] [--update]
#
# For each line of bench/callgrind_ratios.txt of the chosen mode ("MODE STUB
# FLOOR CLIENT RATIO TOLERANCE"), bench/callgrind.sh measures FLOOR and
# CLIENT (instructions per call, none/STUB/c1, one caller) --runs times
# (3), one after the other in each run, and the guard compares the median
# of the runs' CLIENT / FLOOR with the committed RATIO: above RATIO +
# TOLERANCE is a failure. Both figures come from the same run and the same
# binary, so the ratio does not move with the machine or the compiler, only
# with what rpcguard does per call; the median lets one odd run, of either
# figure, pass unheeded (bench/RESULTS.md, "The guard's estimator").
#
# A STUB of the form stream-SHAPE/STUB (e.g. stream-client/sync) measures
# a stream instead: bench/callgrind.sh --stream=SHAPE --stub=STUB, 5
# streams of 1,000 messages (--stream_calls), instructions per message,
# against the stream floor (hijack-floor: every operation forwarded to one
# attempt, nothing kept).
#
# The floors: hijack-floor for the sync stub (an interceptor that hijacks
# every call and forwards it: what any retrying interceptor pays before
# doing anything), pass-through for callback (rpcguard rides the
# application's own call there).
#
# TOLERANCE is 0.02, or the spread of the ratio measured over repeated
# guard runs if larger (bench/RESULTS.md, "A guard on the no-failure
# path"). --update writes the ratios measured into
# bench/callgrind_ratios.txt, tolerances kept: commit it on its own, saying
# why the path grew.
#
# --mode=fastbuild (the default) reads the binary the test stage of CI
# already built: no build of its own. Its ratios are larger than opt's
# (rpcguard's code at -O0 against gRPC's optimised library) and move with
# the same changes; --mode=opt measures the build users run.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=fastbuild
calls=300
stream_calls=5
runs=3
update=0
for arg in "$@"; do
  case "$arg" in
    --mode=*) mode=${arg#--mode=} ;;
    --calls=*) calls=${arg#--calls=} ;;
    --stream_calls=*) stream_calls=${arg#--stream_calls=} ;;
    --runs=*) runs=${arg#--runs=} ;;
    --update) update=1 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "callgrind_guard.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
ratios=bench/callgrind_ratios.txt
[ -f "$ratios" ] || { echo "callgrind_guard.sh: no $ratios" >&2; exit 2; }
lines=$(grep -E "^$mode " "$ratios" || true)
[ -n "$lines" ] || { echo "callgrind_guard.sh: no $mode line in $ratios" >&2; exit 2; }

failed=0
updated=$(mktemp)
grep -vE "^$mode " "$ratios" >"$updated" || true
# fd 3: nothing a measured run starts can read the list.
while read -r _ stub floor client committed tolerance <&3; do
  # A run's figures move with gRPC's background threads (pollers, timers)
  # waking while valgrind runs slowly, up to 10% on the callback stub, and
  # either figure of a run can be the odd one: the median of the runs'
  # ratios, each from two figures measured back to back.
  ratios_seen=()
  shape=()
  n=$calls
  unit=call
  run_stub=$stub
  if [[ "$stub" == stream-*/* ]]; then
    spec=${stub#stream-}  # SHAPE/STUB
    shape=(--stream="${spec%%/*}")
    run_stub=${spec#*/}
    n=$stream_calls
    unit=msg
  fi
  for ((r = 1; r <= runs; r++)); do
    out=$(mktemp -d)
    table=$(bench/callgrind.sh --brief --mode="$mode" --stub="$run_stub" --calls="$n" \
      "${shape[@]}" --out="$out" "$floor" "$client" 2>"$out/err" </dev/null) || {
      cat "$out/err" >&2
      echo "callgrind_guard.sh: callgrind.sh failed for $stub $client" >&2
      exit 1
    }
    ir() { awk -F'|' -v c="$1" '$2 ~ "^ " c " $" {gsub(/ /, "", $3); print $3; exit}' <<<"$table"; }
    f=$(ir "$floor")
    c=$(ir "$client")
    if [ -z "$f" ] || [ -z "$c" ]; then
      echo "callgrind_guard.sh: no figures for $stub $floor/$client in:" >&2
      echo "$table" >&2
      exit 1
    fi
    echo "callgrind_guard.sh: $mode $stub run $r: $floor $f, $client $c Ir/$unit"
    ratios_seen+=("$(awk -v c="$c" -v f="$f" 'BEGIN { printf "%.4f", c / f }')")
    rm -rf "$out"
  done
  # The median; with an even number of runs, the mean of the middle two.
  ratio=$(printf '%s\n' "${ratios_seen[@]}" | sort -g | awk '
    { v[NR] = $1 }
    END { printf "%.4f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  verdict=$(awk -v m="$ratio" -v c="$committed" -v t="$tolerance" \
    'BEGIN { print (m > c + t) ? "FAIL" : "ok" }')
  echo "$verdict $mode $stub $client/$floor: $ratio (median of $runs runs: ${ratios_seen[*]}); committed $committed + $tolerance"
  [ "$verdict" = ok ] || failed=1
  if ((update)); then
    echo "$mode $stub $floor $client $ratio $tolerance" >>"$updated"
  else
    echo "$mode $stub $floor $client $committed $tolerance" >>"$updated"
  fi
done 3<<<"$lines"

if ((update)); then
  {
    grep -E '^#' "$ratios"
    grep -vE '^#' "$updated" | sort
  } >"$ratios.new"
  mv "$ratios.new" "$ratios"
  echo "callgrind_guard.sh: wrote $ratios"
  rm -f "$updated"
  exit 0
fi
rm -f "$updated"
if ((failed)); then
  cat >&2 <<'EOF'
callgrind_guard.sh: rpcguard's no-failure path grew against its floor.
  Find where with bench/callgrind.sh (it lists the functions that grew). If
  the growth is wanted, run bench/callgrind_guard.sh --update and commit
  bench/callgrind_ratios.txt on its own, saying why.
EOF
  exit 1
fi
