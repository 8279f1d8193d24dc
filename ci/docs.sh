#!/usr/bin/env bash
# The documentation: the configuration reference against the code (ci/env-vars.sh) and
# the book under docs/, built and tested by mdBook. Prints each part's time. (The API docs
# are ci/lint.sh's: cargo doc without a warning.)
#
# mdBook comes from crates.io when the pinned version is not on PATH: a debug build without
# default features (no `serve`/`watch`/search), the cheapest that builds and tests the book.
# Measured on this 2-core machine under other load: 3 min 25 s wall, 120 s of CPU, against
# 7 min 53 s and 255 s for a release build; building this book takes it about a second
# either way. Installed where cargo installs (~/.cargo/bin), so later runs on the same
# machine skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK_VERSION=0.5.4
t0=$(date +%s)
took() { echo "ci/docs.sh: $1 took $(( $(date +%s) - t0 )) s"; t0=$(date +%s); }

ci/env-vars.sh
took "the variable check"

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
  cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --debug --quiet
  took "installing mdbook $MDBOOK_VERSION"
fi
mdbook build docs
mdbook test docs
took "mdbook build and test"
