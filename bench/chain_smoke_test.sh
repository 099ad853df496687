#!/usr/bin/env bash
# Smoke test of //bench:chain: one scenario, two clients, --quick; the four
# processes of each run start and stop, the table has a row per client and
# the JSON every figure and series; then the two-method scenario beside a
# busy loop.
set -euo pipefail

chain="$TEST_SRCDIR/rpcguard/bench/chain"
out="${TEST_TMPDIR:-/tmp}"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$chain" --quick --scenarios=blip --clients=none,rpcguard \
  --json="$out/chain.json" >"$out/chain.md" 2>"$out/chain.err" ||
  fail "chain exited $? ($(cat "$out/chain.err"))"

rows=$(grep -c '^| blip | ' "$out/chain.md" || true)
[ "$rows" = 2 ] || fail "expected 2 table rows, got $rows"
cells=$(grep -c '"scenario": "blip"' "$out/chain.json" || true)
[ "$cells" = 2 ] || fail "expected 2 JSON cells, got $cells"
for field in attempts_c_per_request attempts_c_per_request_fault \
  attempts_c_worst_1s attempts_c_max_per_request goodput_per_s success_ratio p50_ms p99_ms recovery_s \
  breaker_openings_generator breaker_openings_a breaker_openings_b \
  independent_success_ratio loadavg_1m '"load": 0' duration_s \
  fault_start_s fault_end_s offered_per_s '"series": {"t_s"' \
  '"series_100ms": {"t_s"' '"attempts_c": [' '"attempts_a": [' '"ok": ['; do
  n=$(grep -c -F "$field" "$out/chain.json" || true)
  [ "$n" -ge 2 ] || fail "JSON field $field in $n cells, want 2"
done
grep -q '"client": "rpcguard"' "$out/chain.json" || fail "no rpcguard cell"
# Without retries, one attempt reaches C per request over the run (the
# warm-up is not counted). Only the run's mean: a request sent at the end of
# a second may reach C in the next, so a worst second can read 1.01 on a
# busy machine; and under load a request may time out before it reaches C.
mean=$(awk -F'|' '$2 ~ /blip/ && $3 ~ /none/ {gsub(/ /, "", $4); print $4}' \
  "$out/chain.md")
awk -v m="$mean" 'BEGIN { exit !(m >= 0.9 && m <= 1.01) }' ||
  fail "none: $mean attempts at C per request, want 1 ($(cat "$out/chain.md"))"
# The store counts each request's attempts: without retries, none made more
# than one.
most=$(awk -F'|' '$2 ~ /blip/ && $3 ~ /none/ {gsub(/ /, "", $7); print $7}' \
  "$out/chain.md")
[ "$most" = "1(1)" ] || fail "none: most attempts for one request $most, want 1"

# The two-method scenario beside one busy loop, short: its own table has a
# row, the JSON the independent method's figures and series, at load 1.
"$chain" --quick --duration=2 --scenarios=split --clients=rpcguard_fleet \
  --load=1 --json="$out/split.json" >"$out/split.md" 2>"$out/split.err" ||
  fail "chain (split) exited $? ($(cat "$out/split.err"))"
grep -q '^| split, 1 loop | rpcguard_fleet | [0-9.]*% ' "$out/split.md" ||
  fail "no independent-method row ($(cat "$out/split.md"))"
for field in '"load": 1' '"loads": [1]' '"independent_ok": [' \
  '"scenario": "split"'; do
  grep -q -F "$field" "$out/split.json" || fail "split JSON: no $field"
done
grep -q '"independent_success_ratio": [0-9]' "$out/split.json" ||
  fail "split JSON: no independent success"

# A bad flag is an error, before any process starts.
if "$chain" --bogus >/dev/null 2>&1; then fail "--bogus accepted"; fi
if "$chain" --load=x >/dev/null 2>&1; then fail "--load=x accepted"; fi
echo PASS
