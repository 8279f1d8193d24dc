#!/usr/bin/env bash
# The Python package (python/): a venv under target/, maturin, numpy and pytest from PyPI,
# `pip install ./python` as a user would, then the pytest suite (python/tests), which
# starts its ranks as separate Python processes on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-venv
# pip runs maturin as a command: the venv's.
export PATH="$PWD/$venv/bin:$PATH"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet maturin numpy pytest ml_dtypes
# --no-build-isolation: the venv's maturin builds, with no second download per run.
"$venv/bin/pip" install --quiet --no-build-isolation --force-reinstall --no-deps ./python
"$venv/bin/python" -m pytest -q python/tests "$@"
