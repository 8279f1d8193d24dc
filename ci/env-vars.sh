#!/usr/bin/env bash
# The configuration reference (docs/src/configuration.md) against the code: every RCOLL_*
# name that a Rust, C, Python or shell file of the repository reads must have a row in the
# reference, and every row must name a variable some file reads. A variable in one and not
# the other fails, naming it. Rows are table lines whose first cell names the variable(s).
#
# Usage: ci/env-vars.sh [reference.md]
set -euo pipefail
cd "$(dirname "$0")/.."
reference=${1:-docs/src/configuration.md}

code=$(mktemp) documented=$(mktemp) constants=$(mktemp)
trap 'rm -f "$code" "$documented" "$constants"' EXIT
# Tracked files and new ones not yet ignored, so that a variable added in a work tree is
# caught before it is committed.
files() {
  git ls-files --cached --others --exclude-standard -z -- \
    '*.rs' '*.c' '*.h' '*.py' '*.pyi' '*.sh' '.ci/run' ':!:docs/**'
}
# Names of the form RCOLL_* that are not environment variables: constants the code defines
# (the C header's macros and include guards, capi's `pub const`s behind them), and the
# family prefixes that comments write as RCOLL_IB_* or RCOLL_SHM_*.
files | xargs -0 grep -ohE '(#define|#ifndef|const) RCOLL_[A-Z0-9_]+' \
  | grep -oE 'RCOLL_[A-Z0-9_]+' | sort -u >"$constants"
not_variables() { grep -vxF -f "$constants" | grep -vE '^RCOLL_[A-Z0-9_]*_$'; }
files | xargs -0 grep -ohE 'RCOLL_[A-Z0-9_]+' | not_variables | sort -u >"$code"
grep -E '^\|' "$reference" | cut -d'|' -f2 | grep -oE 'RCOLL_[A-Z0-9_]+' | sort -u >"$documented"

status=0
missing=$(comm -23 "$code" "$documented")
stale=$(comm -13 "$code" "$documented")
if [ -n "$missing" ]; then
  echo "ci/env-vars.sh: read by the code but not in $reference:" >&2
  sed 's/^/  /' <<<"$missing" >&2
  status=1
fi
if [ -n "$stale" ]; then
  echo "ci/env-vars.sh: in $reference but read by no code:" >&2
  sed 's/^/  /' <<<"$stale" >&2
  status=1
fi
[ "$status" = 0 ] && echo "ci/env-vars.sh: $(wc -l <"$code") RCOLL_* variables, each read by the code and documented"
exit "$status"
