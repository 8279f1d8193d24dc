#!/usr/bin/env bash
# The documentation: the configuration reference against the code (ci/env-vars.sh), the
# book under docs/ built and tested by mdBook, and its links. Prints each part's time.
# (The API docs are ci/lint.sh's: cargo doc without a warning.)
#
# mdBook comes from crates.io when the pinned version is not on PATH: a debug build without
# default features (no `serve`/`watch`/search), the cheapest that builds and tests the book.
# Measured on this 2-core machine under other load (load average 6-10): 3 min 25 s to
# 5 min 30 s wall and 117-120 s of CPU, against 7 min 53 s and 255 s for a release build;
# building and testing this book takes it 1-2 s either way. Installed where cargo installs
# (~/.cargo/bin), so later runs on the same machine skip it.
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

# Every link from one page of the book to another lands on a page, and a heading, that
# exist (mdBook checks neither), and every file the README links to exists.
broken=0
book=target/book
while IFS=: read -r page href; do
  target=${href%%#*} anchor=${href#*#}
  [ "$target" = "$href" ] && anchor=
  file=$(realpath -m "$(dirname "$page")/$target")
  if [ ! -f "$file" ]; then
    echo "ci/docs.sh: ${page#$book/} links to $href: no such page" >&2; broken=1
  elif [ -n "$anchor" ] && ! grep -q "id=\"$anchor\"" "$file"; then
    echo "ci/docs.sh: ${page#$book/} links to $href: no such heading" >&2; broken=1
  fi
done < <(grep -roE 'href="[^"#:]+\.html(#[^"]*)?"' "$book" --include=*.html \
           | sed -E 's/href="([^"]*)"/\1/' | sort -u)
while read -r path; do
  [ -e "$path" ] || { echo "ci/docs.sh: README.md links to $path: no such file" >&2; broken=1; }
done < <(grep -oE '\]\([^)#:]+' README.md | sed 's/^](//' | sort -u)
[ "$broken" = 0 ]
took "the links"
