#!/usr/bin/env bash
# Remove what soft-roce/setup.sh created: its rxe devices, the veth pair, the policy-routing
# rules and the sysctls it changed, by replaying setup.sh's undo log backwards.
#
# Usage: soft-roce/teardown.sh [-q]
#
# Touches nothing that setup.sh did not create; without an undo log it does nothing.
# RCOLL_SOFTROCE_STATE names the undo log (default /run/rcoll-soft-roce.state).
set -euo pipefail

state="${RCOLL_SOFTROCE_STATE:-/run/rcoll-soft-roce.state}"
quiet=false
case "${1:-}" in
    -q | --quiet) quiet=true ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "soft-roce/teardown.sh: unknown argument $1" >&2; exit 2 ;;
esac

if [[ ! -e "$state" ]]; then
    "$quiet" || echo "teardown.sh: nothing to remove (no $state)"
    exit 0
fi
if [[ "$EUID" -ne 0 ]]; then
    exec sudo RCOLL_SOFTROCE_STATE="$state" "$0" "$@"
fi

# Each line of the log is one shell-quoted command written by setup.sh (a root-owned file).
# A step that fails (say, a device someone already removed) is reported and skipped, so one
# missing piece does not leave the rest in place.
failed=0
steps="$(tac "$state")"
while IFS= read -r step; do
    [[ -n "$step" ]] || continue
    "$quiet" || echo "teardown.sh: $step"
    if ! eval "$step" 2>/dev/null; then
        echo "soft-roce/teardown.sh: could not undo: $step" >&2
        failed=1
    fi
done <<<"$steps"
rm -f "$state"
exit "$failed"
