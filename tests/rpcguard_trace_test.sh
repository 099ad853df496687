#!/usr/bin/env bash
# Runs //tools:rpcguard_trace on a sample log: summary, --call timeline,
# stdin, exit codes.
set -uo pipefail
tool="$1"
log="$2"
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
echo PASS
