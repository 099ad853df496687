#!/usr/bin/env bash
# promtool (Debian's `prometheus` package, installed by ./bazelw) checks
# rpcguard_alerts.yml and runs its unit tests, rpcguard_alerts_test.yml.
# Without promtool the test skips, except under CI=true, where it fails.
set -euo pipefail

dir="$TEST_SRCDIR/rpcguard/tools/prometheus"
promtool=$(command -v promtool || true)
[ -n "$promtool" ] || [ ! -x /usr/bin/promtool ] || promtool=/usr/bin/promtool
if [ -z "$promtool" ]; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL: promtool is missing (install Debian's prometheus: ./bazelw does)" >&2
    exit 1
  fi
  echo "SKIP: no promtool"
  exit 0
fi
# promtool resolves rule_files against the test file's folder.
cd "$dir"
"$promtool" check rules rpcguard_alerts.yml
"$promtool" test rules rpcguard_alerts_test.yml
echo PASS
