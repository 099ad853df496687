#!/usr/bin/env bash
# Smoke test of //bench:compare: every mode runs end to end on a tiny load,
# starts and stops its server process, and writes well-formed JSON.
set -euo pipefail

compare="$TEST_SRCDIR/rpcguard/bench/compare"
out="${TEST_TMPDIR:-/tmp}"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Every scenario with one caller, every client: 10 scenarios x 5 clients.
"$compare" --only=/c1 --calls=20 --seconds=0.3 --rounds=1 --warmup=5 \
  --json="$out/compare.json" >"$out/compare.md" 2>"$out/compare.err" ||
  fail "compare exited $? ($(cat "$out/compare.err"))"
rows=$(grep -c '^| .* | [0-9]* | ' "$out/compare.md" || true)
[ "$rows" = 50 ] || fail "expected 50 table rows, got $rows"
cells=$(grep -c '"scenario": ' "$out/compare.json" || true)
[ "$cells" = 50 ] || fail "expected 50 JSON cells, got $cells"
grep -q '"client": "rpcguard"' "$out/compare.json" || fail "no rpcguard cell"
grep -q '"client": "hijack-floor"' "$out/compare.json" ||
  fail "no hijack-floor cell"

# One of issue 13's scenarios, the quickest (about a second), three clients;
# the others take seconds each by design (a restart, steady loads).
"$compare" --only=burst --clients=plain,grpc-retry-throttled,rpcguard \
  --rounds=1 --warmup=5 --json="$out/burst.json" >"$out/burst.md" 2>"$out/burst.err" ||
  fail "--only=burst exited $? ($(cat "$out/burst.err"))"
rows=$(grep -c '^| burst: ' "$out/burst.md" || true)
[ "$rows" = 3 ] || fail "expected 3 burst rows, got $rows"
grep -q '"figure": "burst", "client": "rpcguard"' "$out/burst.json" ||
  fail "no rpcguard burst figure"
grep -q "^burst: rpcguard's breaker " "$out/burst.md" || fail "no burst target"

# Issue 14's tail scenario, every client of its table, a few calls, on the
# sync and the callback stub (where a hedged call rides its first copy).
"$compare" --only=tail --calls=40 --rounds=1 --warmup=5 \
  --json="$out/tail.json" >"$out/tail.md" 2>"$out/tail.err" ||
  fail "--only=tail exited $? ($(cat "$out/tail.err"))"
rows=$(grep -c '^| tail: ' "$out/tail.md" || true)
[ "$rows" = 5 ] || fail "expected 5 tail rows, got $rows"
grep -q '"tail": "tail", "client": "rpcguard-hedged-adaptive"' \
  "$out/tail.json" || fail "no rpcguard-hedged-adaptive tail cell"
grep -q '^tail: rpcguard-hedged .* attempts/call (target <= 1.10: ' \
  "$out/tail.md" || fail "no tail target"
rows=$(grep -c '^| tail, callback stub: ' "$out/tail.md" || true)
[ "$rows" = 5 ] || fail "expected 5 callback tail rows, got $rows"
grep -q '^tail/callback: rpcguard-hedged .* attempts/call (target <= 1.10: ' \
  "$out/tail.md" || fail "no callback tail target"

# Issue 23's streams: every stream scenario (bidi and CQ-async among them),
# its four clients (the hijack floor among them, issue 31), a few
# 1,000-message calls each.
"$compare" --only=streams --calls=3 --rounds=1 --warmup=2 \
  --json="$out/streams.json" >"$out/streams.md" 2>"$out/streams.err" ||
  fail "--only=streams exited $? ($(cat "$out/streams.err"))"
rows=$(grep -c '^| .* stream, .* | [0-9]* | ' "$out/streams.md" || true)
[ "$rows" = 40 ] || fail "expected 40 stream rows, got $rows"
grep -q '"stream": "streams/fail30/client/sync", "client": "rpcguard"' \
  "$out/streams.json" || fail "no rpcguard fail30 client-stream cell"
grep -q '^streams/none/server/sync: rpcguard / plain = ' "$out/streams.md" ||
  fail "no stream CPU target"
grep -q 'rpcguard / hijack-floor = ' "$out/streams.md" ||
  fail "no stream floor ratio"
grep -q '^streams/fail30/server/sync: rpcguard success ' "$out/streams.md" ||
  fail "no stream success target"
# No stream through rpcguard, the floor or a plain channel ends OK without
# every message. (gRPC's retry can: bench/RESULTS.md, issue 23.)
if grep -E '"client": "(rpcguard|hijack-floor|plain)"' "$out/streams.json" |
  grep -q '"wrong": [1-9]'; then
  fail "a stream ended OK with the wrong messages"
fi

"$compare" --headline --calls=50 --rounds=2 --warmup=5 \
  --json="$out/headline.json" >"$out/headline.md" 2>"$out/headline.err" ||
  fail "--headline exited $? ($(cat "$out/headline.err"))"
grep -q '^sync: rpcguard / plain = ' "$out/headline.md" || fail "no sync ratio"
grep -q '^callback: rpcguard / pass-through = ' "$out/headline.md" ||
  fail "no callback ratio"
for stub in sync callback; do
  grep -q "^$stub: rpcguard / hijack-floor = " "$out/headline.md" ||
    fail "no $stub ratio to hijack-floor"
  # The floor's calls all succeed (the ok column is full).
  grep -q "^| $stub | hijack-floor | .* | 100/100 |\$" "$out/headline.md" ||
    fail "hijack-floor, $stub: not every call succeeded"
done

"$compare" --soak=400 --json="$out/soak.json" >"$out/soak.md" \
  2>"$out/soak.err" || fail "--soak exited $? ($(cat "$out/soak.err"))"
grep -q '^client RSS growth: ' "$out/soak.md" || fail "no soak result"

# The server process is gone after every run.
for f in compare burst tail streams headline soak; do
  pid=$(sed -n 's/^compare: fault server pid \([0-9]*\) .*/\1/p' "$out/$f.err")
  [ -n "$pid" ] || fail "$f: no server pid"
  if kill -0 "$pid" 2>/dev/null; then fail "$f: server $pid still running"; fi
done

# A bad flag is an error, before any server starts.
if "$compare" --bogus >/dev/null 2>&1; then fail "--bogus accepted"; fi
echo PASS
