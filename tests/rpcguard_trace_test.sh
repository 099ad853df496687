#!/usr/bin/env bash
# Runs //tools:rpcguard_trace on a sample log: summary, --call timeline,
# stdin, exit codes; and --correlation on a log whose calls carry ids.
set -uo pipefail
tool="$1"
log="$2"
correlated="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }

out="$("$tool" "$log")" || fail "summary exited $?"
echo "$out"
grep -q '^rpcguard trace: 13 lines, 9 events, 2 unparsable$' <<<"$out" || fail "counts"
grep -q '^/payments.v1.Payments/Charge$' <<<"$out" || fail "method"
grep -q '^  calls          3 (done 1, gave up 2, incomplete 0)$' <<<"$out" || fail "calls"
grep -q '^  gave up        breaker_open 1, deadline 1$' <<<"$out" || fail "give-ups"
grep -q '^  payments:443  closed->open 1, open->half_open 1$' <<<"$out" || fail "transitions"
grep -q 'sample_trace.log:11: bad reason=breaker$' <<<"$out" || fail "truncated line"

timeline="$("$tool" --call 9F3C21D4E5A6B708 "$log")" || fail "timeline exited $?"
echo "$timeline"
grep -q 'result: done after 3 attempts; 59.9 ms of backoff' <<<"$timeline" || fail "timeline"

"$tool" --slowest=1 < "$log" | grep -q '^  9f3c21d4e5a6b708  ' || fail "stdin"

"$tool" --call 999 "$log" >/dev/null
[ $? -eq 1 ] || fail "unknown call must exit 1"
"$tool" /nonexistent/file.log >/dev/null 2>&1
[ $? -eq 2 ] || fail "missing file must exit 2"
"$tool" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown flag must exit 2"
"$tool" --call >/dev/null 2>&1
[ $? -eq 2 ] || fail "--call without id must exit 2"
out="$("$tool" --correlation 4BF92F3577B34DA6A3CE929D0E0E4736 "$correlated")" || fail "correlation exited $?"
echo "$out"
grep -q '^rpcguard trace: 5 lines, 2 events, 0 unparsable$' <<<"$out" || fail "trace_id filter counts"
grep -q '^correlation 4BF92F3577B34DA6A3CE929D0E0E4736: 3 events of other calls skipped$' <<<"$out" || fail "skipped"
grep -q '^/shop.v1.Cart/Add$' <<<"$out" || fail "trace_id filter method"
grep -q '^/shop.v1.Cart/Get$' <<<"$out" && fail "trace_id filter kept another call"
out="$("$tool" --correlation=x-request-id:r-9 "$correlated")" || fail "key:value exited $?"
grep -q '^rpcguard trace: 5 lines, 1 events, 0 unparsable$' <<<"$out" || fail "key:value filter (JSON line)"
grep -q '^/shop.v1.Cart/Get$' <<<"$out" || fail "key:value filter method"
out="$("$tool" --correlation r-7 --call a1 "$correlated")" || fail "timeline with ids exited $?"
grep -q '^call a1  /shop.v1.Cart/Add  key=k-a1  trace_id=4bf92f3577b34da6a3ce929d0e0e4736  x-request-id=r-7$' <<<"$out" || fail "timeline ids"
"$tool" --correlation nobody "$correlated" | grep -q '^rpcguard trace: 5 lines, 0 events' || fail "unknown id"
"$tool" --correlation >/dev/null 2>&1
[ $? -eq 2 ] || fail "--correlation without id must exit 2"
echo PASS
