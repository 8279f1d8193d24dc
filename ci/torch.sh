#!/usr/bin/env bash
# The torch.distributed backend (python/rcoll/torch): torch 2.15.0 and the test
# requirements from PyPI into the venv ci/python.sh made (target/python-venv; made here
# if missing), the package installed as ci/python.sh does, then
#   - torch's own distributed suite with BACKEND=rcoll: every test that
#     python/tests_torch/distributed_suite.txt lists as `pass` (2 ranks; `pass@8`, the
#     suite's subgroup tests, with RCOLL_TORCH_SUITE_8=1) must run and pass (a skip is a
#     failure; the count of those that ran is printed);
#   - python/tests_torch (pytest): DDP under gloo and rcoll on 2 and 4 ranks, ending equal;
#     the backend's own calls against gloo's results, a dead rank, Work.wait's timeout.
# Prints the stage's time.
#
# `ci/torch.sh --prefetch` only downloads what the stage installs, into target/wheels (in a
# venv of its own), and writes its exit status to target/wheels.done: .ci/run starts it in
# the background first thing, so that torch's ~3 GB arrive while the build and the other
# tests use the CPUs; the stage then installs from there, once the download is done.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ "${1:-}" = --prefetch ]; then
  rm -rf target/wheels target/wheels.done
  mkdir -p target/wheels
  echo $$ >target/wheels.pid
  rc=0
  { python3 -m venv target/prefetch-venv &&
    target/prefetch-venv/bin/pip install --quiet --upgrade pip &&
    target/prefetch-venv/bin/pip download --quiet --no-cache-dir -d target/wheels \
      maturin -r python/requirements-test.txt; } || rc=$?
  echo "$rc" >target/wheels.done
  echo "ci/torch.sh --prefetch: exit $rc in $(($(date +%s) - start)) s"
  exit "$rc"
fi
venv=target/python-venv
export PATH="$PWD/$venv/bin:$PATH"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
fi
# The CUDA wheel (~3 GB download, 5.4 GB installed, ~75 s) when torch is not there yet;
# nothing when it is.
# From the prefetched wheels when a prefetch ran (waiting while it still runs) and succeeded.
from=()
if [ -d target/wheels ]; then
  while [ ! -f target/wheels.done ] && kill -0 "$(cat target/wheels.pid 2>/dev/null)" 2>/dev/null; do
    sleep 2
  done
  if [ "$(cat target/wheels.done 2>/dev/null)" = 0 ]; then
    from=(--no-index --find-links target/wheels)
  fi
  echo "ci/torch.sh: the prefetch's status: $(cat target/wheels.done 2>/dev/null || echo 'ended without one'), after $(($(date +%s) - start)) s"
fi
"$venv/bin/pip" install --quiet "${from[@]}" maturin -r python/requirements-test.txt
if ! "$venv/bin/python" -c "import rcoll.torch" 2>/dev/null || [ "${RCOLL_REINSTALL:-1}" = 1 ]; then
  "$venv/bin/pip" install --quiet --no-build-isolation --force-reinstall --no-deps ./python
fi
installed=$(date +%s)
export RCOLL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
# Each rank process runs every listed test in turn (distributed_suite.py says why). The
# `pass@8` subgroup tests take 2 min on 8 ranks here, nearly all of it 8 processes importing
# torch on 2 cores: run with RCOLL_TORCH_SUITE_8=1 (python/tests_torch's own tests cover
# new_group and split_group on 2-4 ranks).
"$venv/bin/python" python/tests_torch/distributed_suite.py --world-size 2
if [ "${RCOLL_TORCH_SUITE_8:-0}" = 1 ]; then
  "$venv/bin/python" python/tests_torch/distributed_suite.py --world-size 8
fi
"$venv/bin/python" -m pytest -q python/tests_torch "$@"
end=$(date +%s)
echo "ci/torch.sh: $((end - start)) s (install $((installed - start)) s, tests $((end - installed)) s)"
