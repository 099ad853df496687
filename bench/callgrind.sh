#!/usr/bin/env bash
# callgrind.sh: where a client's no-failure time goes, in instructions
# (stable on a noisy machine, unlike CPU time).
#
#   bench/callgrind.sh [--stub=sync|callback] [--calls=N] [--out=DIR]
#                      [--mode=opt|fastbuild] [--callers=N] [--brief]
#                      [--stream=server|client|bidi] [CLIENT...]
#
# Runs //bench:compare (built -c opt, or as --mode says: CI's guard,
# bench/callgrind_guard.sh, reads the fastbuild binary its test stage built)
# under callgrind for the scenario
# none/STUB/c1 (no faults, one caller; --callers=8 runs none/STUB/c8, whose
# N calls are shared by 8 callers), once per CLIENT (default: plain
# rpcguard; also pass-through, pass-through-headers, hijack-floor,
# hijack-floor-headers, grpc-retry; e.g. `hijack-floor rpcguard` shows what
# rpcguard adds to the hijacking mechanism, `hijack-floor-headers
# rpcguard` what it adds beyond its two headers). The fault server runs
# natively in its own process: valgrind does not follow the fork. compare
# zeroes callgrind's counters when the measured load starts and dumps them
# when it ends (CALLGRIND_ZERO_STATS / CALLGRIND_DUMP_STATS_AT in
# bench/load.cc), so the dump used holds exactly N calls and nothing of
# start-up or warm-up.
# For each client the command is:
#
#   valgrind --tool=callgrind --dump-instr=no \
#     --callgrind-out-file=DIR/CLIENT.%p bazel-bin/bench/compare \
#     --only=none/STUB/c1 --clients=CLIENT --calls=N --rounds=1 \
#     --warmup=200 --deadline_ms=5000 --hedging_delay_ms=1000
#
# (The hedged clients' delay is 1 s here: under valgrind a call takes
# milliseconds, and with the table's 10 ms some would really hedge, which
# is not the no-hedge path this measures.)
# Prints the instructions per call of each client (only that with --brief),
# then
#   1. rpcguard's own functions (inclusive: with what they call), Ir per call
#      and % of the last client's total;
#   2. how often each client calls what costs (a second gRPC call and
#      context, batches, mallocs, mutexes, condition-variable waits of a
#      thread hop), per call;
#   3. the functions whose own (exclusive) instructions per call grow most
#      from the first client to the last. Frames that stay on a stack across
#      the whole load (thread entry points, the caller's loop) get their
#      running callees booked to them by the dump and are left out (any
#      function with 10% or more of the total as its own cost).
# --stream=SHAPE measures a stream instead (issue 31 part 3): the scenario
# streams/none/SHAPE/STUB (--stub=sync, callback or cq) of //bench:compare,
# N streams of 1,000 messages one after another, figures per message
# (Ir / (N x 1,000)); clients plain, hijack-floor (the stream floor),
# grpc-retry, rpcguard. E.g.
#   bench/callgrind.sh --brief --stream=client --stub=cq --calls=20 \
#     hijack-floor rpcguard
# Under valgrind one thread runs at a time, so a thread that waits by
# spinning (rpcguard's Serializer::RunHere, a stream write meeting an event
# of its call on another thread) spins to its bound every time: the
# figures count that wait in full.
# Full reports stay in DIR (callgrind_annotate output per client); open the
# dumps with kcachegrind for the call graph.
#
# Callgrind counts user-space instructions only: thread wake-ups and context
# switches (e.g. a thread hop on the sync path) cost CPU that getrusage sees
# and callgrind does not.
set -euo pipefail
cd "$(dirname "$0")/.."

stub=sync
calls=5000
mode=opt
callers=1
stream=
brief=0
out=/tmp/rpcguard-callgrind
clients=()
for arg in "$@"; do
  case "$arg" in
    --stub=*) stub=${arg#--stub=} ;;
    --calls=*) calls=${arg#--calls=} ;;
    --out=*) out=${arg#--out=} ;;
    --mode=*) mode=${arg#--mode=} ;;
    --callers=*) callers=${arg#--callers=} ;;
    --stream=*) stream=${arg#--stream=} ;;
    --brief) brief=1 ;;
    -h|--help) sed -n '2,61p' "$0"; exit 0 ;;
    -*) echo "callgrind.sh: unknown flag $arg" >&2; exit 2 ;;
    *) clients+=("$arg") ;;
  esac
done
if ((${#clients[@]} == 0)); then clients=(plain rpcguard); fi
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind" >&2; exit 2; }

case "$mode" in
  opt|fastbuild) ;;
  *) echo "callgrind.sh: --mode must be opt or fastbuild" >&2; exit 2 ;;
esac
./bazelw build -c "$mode" //bench:compare >&2
# Not bazel-bin: it follows whichever mode was built last.
bin=bazel-out/k8-$mode/bin/bench/compare
mkdir -p "$out"
scenario="none/$stub/c$callers"
unit=call
per=$calls  # what the totals are divided by
if [ -n "$stream" ]; then
  case "$stream" in
    server|client|bidi) ;;
    *) echo "callgrind.sh: --stream must be server, client or bidi" >&2; exit 2 ;;
  esac
  scenario="streams/none/$stream/$stub"
  unit=msg
  per=$((calls * 1000))  # bench/compare/streams.cc's kMessages a stream
fi

# Prints "IR NAME" per function of a callgrind_annotate report, per call.
per_call() {
  awk -v calls="$per" '
    /^ *[0-9][0-9,]* +\(/ {
      ir = $1; gsub(",", "", ir)
      name = $0
      sub(/^ *[0-9,]+ +\([ 0-9.]+%\) +/, "", name)
      sub(/ \[[^]]*\] *$/, "", name)
      sub(/^\?\?\?:/, "", name)
      if (name == "PROGRAM TOTALS") next
      printf "%.1f\t%s\n", ir / calls, name
    }' "$1"
}

# Prints "COUNT NAME" per function of a callgrind dump: the calls made to it,
# per measured call.
call_counts() {
  awk -v n="$per" '
    function id_of(s,   id) {
      if (match(s, /^\([0-9]+\)/)) {
        id = substr(s, RSTART, RLENGTH)
        if (length(s) > RLENGTH) names[id] = substr(s, RLENGTH + 2)
        return id
      }
      names[s] = s
      return s
    }
    /^fn=/ { s = $0; sub(/^fn=/, "", s); id_of(s) }
    /^cfn=/ { s = $0; sub(/^cfn=/, "", s); cur = id_of(s) }
    /^calls=/ { split($0, a, /[= ]/); count[cur] += a[2] }
    END { for (k in count) printf "%.2f\t%s\n", count[k] / n, names[k] }' "$1"
}

# What the calls-per-call table shows.
counted='^(grpc::Channel::CreateCallInternal|grpc::ClientContext::ClientContext\(\)|grpc_call_start_batch|grpc_cq_end_op|grpc::internal::InterceptorBatchMethodsImpl::(RunInterceptors|Proceed)\(\)|grpc_byte_buffer_copy|grpc::ClientContext::AddMetadata|malloc|operator new\(unsigned long\)|absl::[a-z0-9]*::Mutex::(Lock|ReaderLock)\(\)|absl::[a-z0-9]*::Mutex::~Mutex\(\)|absl::[a-z0-9]*::synchronization_internal::GraphCycles::GetId\(void\*\)|gpr_cv_wait|gpr_cv_signal|syscall)'

declare -A total
for client in "${clients[@]}"; do
  rm -f "$out/$client".*
  echo "callgrind.sh: $client, $calls calls of $scenario ..." >&2
  valgrind --tool=callgrind --dump-instr=no \
    --callgrind-out-file="$out/$client.%p" "$bin" \
    --only="$scenario" --clients="$client" --calls="$calls" --rounds=1 \
    --warmup=200 --deadline_ms=5000 --hedging_delay_ms=1000 \
    >"$out/$client.stdout" 2>"$out/$client.log"
  dump=$(grep -l "^desc: Trigger: Client Request: $scenario $client\$" \
    "$out/$client".* | head -1)
  if [ -z "$dump" ]; then
    echo "callgrind.sh: no dump for $client (see $out/$client.log)" >&2
    exit 1
  fi
  total[$client]=$(awk '/^totals:/ {print $2}' "$dump")
  # --brief (bench/callgrind_guard.sh): the totals only, no reports.
  ((brief)) && continue
  callgrind_annotate --inclusive=yes --threshold=100 "$dump" \
    >"$out/$client.inclusive.txt" 2>/dev/null
  callgrind_annotate --threshold=100 "$dump" >"$out/$client.exclusive.txt" 2>/dev/null
  per_call "$out/$client.inclusive.txt" >"$out/$client.inclusive.tsv"
  per_call "$out/$client.exclusive.txt" >"$out/$client.exclusive.tsv"
  call_counts "$dump" >"$out/$client.calls.tsv"
done

first=${clients[0]}
last=${clients[-1]}
echo
echo "## Instructions per $unit, $scenario, $calls calls"
echo
echo "| client | Ir/$unit | vs $first |"
echo "|---|---:|---:|"
for client in "${clients[@]}"; do
  awk -v c="$client" -v t="${total[$client]}" -v f="${total[$first]}" \
    -v n="$per" 'BEGIN { printf "| %s | %.0f | %.2fx |\n", c, t / n, t / f }'
done

((brief)) && exit 0

echo
echo "## $last: rpcguard's own functions, inclusive (top 30)"
echo
echo "| Ir/call | % of $last total | function |"
echo "|---:|---:|---|"
# Top 30 with sed, not head: head closes the pipe early, and when sort has
# more than a pipe buffer left to write its SIGPIPE ends the script
# (pipefail).
grep -E 'rpcguard::' "$out/$last.inclusive.tsv" |
  grep -vE 'rpcguard::(bench|testing)::' |
  sort -t$'\t' -k1,1 -gr | sed -n '1,30p' |
  awk -F'\t' -v t="${total[$last]}" -v n="$per" \
    '{ name = $2; if (length(name) > 150) name = substr(name, 1, 147) "...";
       printf "| %.0f | %.2f%% | `%s` |\n", $1, 100 * $1 * n / t, name }'

echo
echo "## Calls per call"
echo
header="| function |"
rule="|---|"
for client in "${clients[@]}"; do header+=" $client |"; rule+="---:|"; done
echo "$header"
echo "$rule"
cut -f2 "$out"/*.calls.tsv | grep -E "$counted" | sort -u | while read -r fn; do
  line="| \`${fn:0:90}\` |"
  for client in "${clients[@]}"; do
    v=$(awk -F'\t' -v f="$fn" '$2 == f { print $1; exit }' "$out/$client.calls.tsv")
    line+=" ${v:-0} |"
  done
  echo "$line"
done

if [ "$first" != "$last" ]; then
  echo
  echo "## Exclusive Ir/call that grows most from $first to $last (top 30)"
  echo
  echo "| +Ir/call | $first | $last | function |"
  echo "|---:|---:|---:|---|"
  awk -F'\t' '
    FNR == NR { a[$2] = $1; next }
    { b[$2] = $1 }
    END {
      for (k in b) printf "%.1f\t%.1f\t%.1f\t%s\n", b[k] - a[k], a[k], b[k], k
      for (k in a) if (!(k in b)) printf "%.1f\t%.1f\t0\t%s\n", -a[k], a[k], k
    }' "$out/$first.exclusive.tsv" "$out/$last.exclusive.tsv" |
    awk -F'\t' -v t1="${total[$first]}" -v t2="${total[$last]}" -v n="$per" \
      '$2 < 0.1 * t1 / n && $3 < 0.1 * t2 / n' |
    sort -t$'\t' -k1,1 -gr | sed -n '1,30p' |
    awk -F'\t' '{ name = $4; if (length(name) > 150) name = substr(name, 1, 147) "...";
                  printf "| %+.0f | %.0f | %.0f | `%s` |\n", $1, $2, $3, name }'
fi
echo
echo "(reports in $out)"
