#!/usr/bin/env bash
# Usage: ci/check-skips.sh SKIP_LOG ALLOWED
# Prints one summary line of the tests that skipped (the `RCOLL-SKIP: <test>: <reason>`
# lines of SKIP_LOG), then each; exits 1 if one of them is not named in ALLOWED (a line
# starting with the test's name, then a space and the reason; `#` comments).
set -euo pipefail
log=$1 allowed=$2
[ -f "$log" ] || { echo "check-skips: no skip log $log (were the tests run?)" >&2; exit 1; }
# The test's name: what follows the marker, up to the first ': ' (a name's '::' has none).
names=$(sed -n 's/^RCOLL-SKIP: //p' "$log" | awk '{ i = index($0, ": "); print (i ? substr($0, 1, i - 1) : $0) }' | sort -u)
count=$(grep -c . <<<"$names" || true)
echo "skipped: $count test(s)"
bad=0
while IFS= read -r name; do
  [ -n "$name" ] || continue
  line=$(grep -m1 -F "RCOLL-SKIP: $name: " "$log" || true)
  reason=${line#"RCOLL-SKIP: $name: "}
  if awk -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$allowed"; then
    echo "  $name: $reason (allowed)"
  else
    echo "  $name: $reason -- NOT in $allowed: make it run here, or list it with a reason"
    bad=1
  fi
done <<<"$names"
[ "$bad" = 0 ] || echo "check-skips: a test skipped that $allowed does not allow" >&2
exit $bad
