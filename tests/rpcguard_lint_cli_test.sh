#!/usr/bin/env bash
# Runs //tools:rpcguard_lint on tests/lint/undeclared.proto's descriptor set:
# --strict exits 1 naming the undeclared method with its file and line; a
# JSON config can declare it; bad arguments and input exit 2 with a message.
set -uo pipefail
tool="$1"
set_file="$2"
proto="$3"
config="$4"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

line="$(grep -n 'rpc Cancel(' "$proto" | cut -d: -f1)"
[ -n "$line" ] || fail "no Cancel in $proto"
want="tests/lint/undeclared.proto:$line:3: error: lint.undeclared.v1.Orders.Cancel: no idempotency declaration from any source"

"$tool" --strict "$set_file" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out" "$tmp/err"
[ $rc -eq 1 ] || fail "--strict on an undeclared RPC exited $rc, not 1"
grep -qF "$want" "$tmp/err" || fail "the problem does not name method, file and line"
grep -q '^/lint.undeclared.v1.Orders/Cancel  (tests/lint/undeclared.proto:'"$line"':3)$' "$tmp/out" ||
  fail "Cancel is not listed with its place"
grep -q '^  idempotency:       UNKNOWN  \[rpcguard default\]$' "$tmp/out" || fail "Explain's wording"
grep -q '^  idempotency:       NO_SIDE_EFFECTS  \[proto: idempotency_level\]$' "$tmp/out" ||
  fail "Get's declaration"
grep -q '^rpcguard_lint: 2 RPCs (0 streaming), 1 problem$' "$tmp/out" || fail "summary"

# Without --strict the same problem is a warning, and the exit is 0.
"$tool" "$set_file" >/dev/null 2>"$tmp/err" || fail "without --strict exited $?"
grep -qF "${want/error:/warning:}" "$tmp/err" || fail "no warning without --strict"

# A config that declares Cancel settles it.
"$tool" --strict --config "$config" "$set_file" >"$tmp/out" 2>&1 ||
  fail "--config declaring Cancel exited $?"
grep -q 'UNKNOWN  \[config: method entry\]' "$tmp/out" || fail "config's source"
"$tool" --strict "--config=$config" "$set_file" >/dev/null 2>&1 || fail "--config= form"

# Bad arguments and input: exit 2, with a message.
expect2() {
  local what="$1" msg="$2"
  shift 2
  "$tool" "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what exited $rc, not 2"
  grep -qF -- "$msg" "$tmp/err" || { cat "$tmp/err"; fail "$what: no '$msg'"; }
}
printf '{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 1}}]}' >"$tmp/bad.json"
expect2 "a bad config" "bad.json: methodConfig[0].retryPolicy.maxAttempts: must be at least 2" \
  --config "$tmp/bad.json" "$set_file"
expect2 "a .proto for a set" "undeclared.proto: not a FileDescriptorSet" "$proto"
: >"$tmp/empty.pb"
expect2 "an empty set" "empty.pb: empty, not a FileDescriptorSet" "$tmp/empty.pb"
head -c 40 "$set_file" >"$tmp/cut.pb"
expect2 "a truncated set" "cut.pb: not a FileDescriptorSet, or a truncated one" "$tmp/cut.pb"
expect2 "a missing file" "cannot read /nonexistent.pb" /nonexistent.pb
expect2 "no set" "no descriptor set given"
expect2 "an unknown flag" "unknown flag --bogus" --bogus "$set_file"
expect2 "--config without a file" "--config needs a file" "$set_file" --config
echo PASS
