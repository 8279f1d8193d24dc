#!/usr/bin/env bash
# Real MPI clients nobody here wrote, against librcoll_mpi.so (mpi/). Their code is fetched
# at test time into target/mpi-clients, never committed.
#  (a) MPICH's collective tests (test/mpi/coll of Debian's mpich source package, fetched
#      through a private apt configuration: the system's sources are not touched), built
#      against Open MPI's mpicc, each run of its testlist with the shim preloaded serving
#      every size (the reductions' and broadcasts' runs on up to 5 ranks also with the shim
#      as it comes), and under plain Open MPI where it failed: every run that passes
#      plainly must pass under the shim, and the shim's statistics must show calls served
#      and none forwarded because the shim could not serve them (no rcoll communicator,
#      MPI_Init not seen).
#  (b) mpi4py's own collective tests (test/test_cco_*.py of its sdist), mpi4py built against
#      the same Open MPI, on 2 and 4 ranks under the shim.
#  (c) the shim built for Debian's MPICH (RCOLL_MPICC=mpicc.mpich, integer handles) passing
#      the project's own shim tests under MPICH's mpiexec.
#  (d) MPI_Alloc_mem memory going zero-copy over RDMA verbs: the shim's ignored test, in the
#      Soft-RoCE VM (soft-roce/run-in-vm.sh).
# mpi4py is built in the background while MPICH's tests are fetched (the network's time).
# Usage: ci/mpi-clients.sh [mpich|mpi4py|mpich-shim|verbs]...  (default: all four)
# RCOLL_MPI_SHIM=path: that librcoll_mpi.so instead of the debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/mpi-clients
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(mpich mpi4py mpich-shim verbs)
t0=$(date +%s)
say() { echo "mpi-clients: $* ($(($(date +%s) - t0)) s)"; }

# The shim for Open MPI: the debug build the test stage made (cargo builds nothing more),
# or RCOLL_MPI_SHIM's.
shim=${RCOLL_MPI_SHIM:-}
if [ -z "$shim" ]; then
  cargo build -q -p rcoll-mpi
  shim=$root/target/debug/librcoll_mpi.so
fi

# --- (a) MPICH's collective tests -----------------------------------------------------
fetch_mpich_tests() {
  local src=$work/mpich
  [ -f "$src/test/mpi/coll/testlist" ] && return 0
  local apt=$work/apt
  mkdir -p "$apt/lists/partial" "$apt/archives"
  # The URI the system's Debian sources use, for its own release's main component.
  local line
  line=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' \
    'Identifier: Packages' 'Component: main' | grep -v -- '-security\|-updates' | head -n 1)
  [ -n "$line" ] || { echo "mpi-clients: no Debian main source in the apt configuration" >&2; return 1; }
  echo "deb-src $line main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$apt/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
    -o "Dir::Cache::Archives=$apt/archives" -o APT::Sandbox::User=root -qq)
  apt-get "${opts[@]}" update
  (cd "$apt" && apt-get "${opts[@]}" source --download-only mpich)
  local orig
  orig=$(ls "$apt"/mpich_*.orig.tar.* | head -n 1)
  rm -rf "$work/mpich.tmp" && mkdir -p "$work/mpich.tmp"
  # test/mpi alone (the tarball's top directory is mpich-<version>).
  tar -xf "$orig" -C "$work/mpich.tmp" --wildcards '*/test/mpi/*'
  mv "$work"/mpich.tmp/mpich-* "$src"
  rmdir "$work/mpich.tmp"
}

build_mpich_tests() {
  local t=$work/mpich/test/mpi
  [ -f "$t/coll/.built" ] && return 0
  # Open MPI 4.1's mpi.h turns the MPI-1 calls removed in MPI-3 (MPI_Type_hvector, ...),
  # which MPICH's dtpools still uses, into errors; the library still has them.
  printf '#define OMPI_OMIT_MPI1_COMPAT_DECLS 0\n#define __mpi_interface_removed__(a, b)\n' \
    >"$work/ompi-compat.h"
  (cd "$t" && ./configure -q CC=mpicc CPPFLAGS="-include $work/ompi-compat.h" \
    --disable-fortran --disable-cxx --disable-romio --disable-spawn --disable-ft-tests \
    >"$work/mpich-configure.log" 2>&1) || { tail -n 30 "$work/mpich-configure.log" >&2; return 1; }
  make -s -C "$t/util" -j2 >"$work/mpich-make.log" 2>&1
  make -s -C "$t/dtpools" -j2 >>"$work/mpich-make.log" 2>&1
  # -k: the MPI-4 tests (persistent collectives) do not build against Open MPI 4.1.
  make -s -k -C "$t/coll" -j2 >>"$work/mpich-make.log" 2>&1 || true
  touch "$t/coll/.built"
}

# One testlist line, plain, with the shim serving every size (shim) or with the shim as it
# comes (default: small calls inside one host given MPI): prints PASS/FAIL and, under the
# shim, the statistics lines; the output of a failed run is kept in $work/mpich-runs.
run_mpich_test() {
  local mode=$1 name=$2 np=$3
  shift 3
  local args=() env=() kv
  for kv in "$@"; do
    case $kv in
      arg=*) args+=("${kv#arg=}") ;;
      env=*) env+=(-x "${kv#env=}") ;;
    esac
  done
  # Unbound: two runs at once would otherwise each bind their rank 0 to the same core.
  # A session directory of its own: two mpiruns starting at once race to make Open MPI's
  # shared one under /tmp (mkdir fails with 'File exists' and orte_init with it).
  local session
  session=$(mktemp -d "$work/ompi-session.XXXXXX")
  local cmd=(mpirun --oversubscribe --bind-to none -np "$np" --mca orte_tmpdir_base "$session"
    --mca pml ob1 --mca btl vader,self "${env[@]}")
  [ "$mode" = plain ] || cmd+=(-x "LD_PRELOAD=$shim" -x RCOLL_MPI_STATS=1 -x RCOLL_TIMEOUT=30)
  # RCOLL_MPI_SHM_MIN=0: rcoll serves every size, the smallest too (which go to MPI inside
  # one host by default): these suites check rcoll's answers.
  # default: the shim's own threshold, whatever this environment says.
  case $mode in
    shim) cmd+=(-x RCOLL_MPI_SHM_MIN=0) ;;
    default) cmd+=(-x RCOLL_MPI_SHM_MIN=) ;;
  esac
  local out rc=0
  out=$(cd "$work/mpich/test/mpi/coll" && timeout -k 5 90 "${cmd[@]}" "./$name" "${args[@]}" 2>&1 </dev/null) || rc=$?
  rm -rf "$session"
  local id="$name $np"
  [ ${#args[@]} -eq 0 ] || id+=" ${args[*]}"
  if [ $rc = 0 ] && grep -q '^ *No Errors' <<<"$out"; then
    echo "PASS $mode $id"
  else
    echo "FAIL $mode $id (exit $rc)"
    printf '%s\n%s\n' "${cmd[*]} ./$name ${args[*]}" "$out" >"$work/mpich-runs/$mode-${id// /_}.txt"
  fi
  grep '^rcoll-mpi: MPI_' <<<"$out" | sed 's/^/STAT /' || true
}

mpich_suite() {
  fetch_mpich_tests
  say "MPICH's test/mpi fetched"
  build_mpich_tests
  local coll=$work/mpich/test/mpi/coll
  say "MPICH's coll tests built: $(find "$coll" -maxdepth 1 -type f -executable | wc -l) programs"
  rm -rf "$work/mpich-runs" && mkdir -p "$work/mpich-runs"
  local log=$work/mpich.log
  : >"$log"
  local name np rest i=0 pids=()
  # Each testlist line run under the shim, RCOLL_MPI_CLIENT_JOBS lines at once (default 2:
  # much of a run is its launch), the logs joined in the testlist's order.
  local jobs=${RCOLL_MPI_CLIENT_JOBS:-2}
  while read -r name np rest; do
    case $name in '' | '#'*) continue ;; esac
    i=$((i + 1))
    if [ ! -x "$coll/$name" ]; then
      echo "NOTBUILT $name $np" >"$work/mpich-runs/$(printf %04d $i).log"
      continue
    fi
    # Under the shim, and plainly only where the shim's run failed: "every run that passes
    # plainly passes under the shim" is "every run that fails under the shim fails
    # plainly", at a fraction of the runs (the plain one right after, under the same load).
    # The reductions' and broadcasts' tests on up to 5 ranks run under the shim as it comes
    # too: small calls given MPI beside large ones served, on the world's communicator
    # and the tests' own.
    local modes=(shim)
    [[ $name =~ ^(allred|bcast|red|op) && $np -le 5 ]] && modes+=(default)
    # shellcheck disable=SC2086 # the testlist's key=value words, one argument each
    {
      out=$(for m in "${modes[@]}"; do run_mpich_test "$m" "$name" "$np" $rest; done)
      echo "$out"
      if grep -q '^FAIL \(shim\|default\)' <<<"$out"; then run_mpich_test plain "$name" "$np" $rest; fi
    } >"$work/mpich-runs/$(printf %04d $i).log" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then
      wait "${pids[0]}"
      pids=("${pids[@]:1}")
    fi
  done <"$coll/testlist"
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$work"/mpich-runs/[0-9][0-9][0-9][0-9].log >"$log"
  local runs shimmed failed plain_too defaults default_passed
  runs=$(grep -c '^\(PASS\|FAIL\) shim' "$log" || true)
  shimmed=$(grep -c '^PASS shim' "$log" || true)
  # Lines that failed under the shim either way (each then run plainly once).
  failed=$(sed -n 's/^FAIL \(shim\|default\) \(.*\) (exit [0-9]*)$/\2/p' "$log" | sort -u | wc -l)
  defaults=$(grep -c '^\(PASS\|FAIL\) default' "$log" || true)
  default_passed=$(grep -c '^PASS default' "$log" || true)
  plain_too=$(grep -c '^FAIL plain' "$log" || true)
  local served forwarded
  served=$(sed -n 's/^STAT rcoll-mpi: MPI_[A-Za-z_]*: \([0-9]*\) served.*/\1/p' "$log" | awk '{ t += $1 } END { print t + 0 }')
  forwarded=$(sed -n 's/^STAT rcoll-mpi: .* served, \([0-9]*\) forwarded.*/\1/p' "$log" | awk '{ t += $1 } END { print t + 0 }')
  say "MPICH coll: $runs runs ($(grep -c '^NOTBUILT' "$log" || true) not built against Open MPI 4.1), $shimmed pass under the shim; of the $failed lines that fail under it (either way), $plain_too fail under plain Open MPI too; $served calls served, $forwarded forwarded; under the shim as it comes $default_passed of $defaults runs pass"
  echo "mpi-clients: forwarded calls by collective and reason (from rank 0 of each run):"
  sed -n 's/^STAT rcoll-mpi: \(MPI_[A-Za-z_]*\): [0-9]* served, [0-9]* forwarded (\(.*\))$/\1 \2/p' "$log" |
    awk '{ c = $1; sub(/^[^ ]* /, ""); n = split($0, parts, ", "); for (i = 1; i <= n; i++) {
           k = parts[i]; m = k + 0; sub(/^[0-9]* /, "", k); sum[c ": " k] += m } }
         END { for (k in sum) printf "  %7d %s\n", sum[k], k }' | sort -rn | head -n 15
  local bad=0 id
  # Every run that fails under the shim (either way) fails plainly too.
  local mode
  while read -r mode id; do
    if ! grep -qF "FAIL plain $id (exit " "$log"; then
      echo "mpi-clients: FAIL: '$id' passes under plain Open MPI, not under the shim ($mode):" >&2
      sed -n 1,40p "$work/mpich-runs/$mode-${id// /_}.txt" >&2 || true
      bad=1
    fi
  done < <(sed -n 's/^FAIL \(shim\|default\) \(.*\) (exit [0-9]*)$/\1 \2/p' "$log")
  if [ "${defaults:-0}" -eq 0 ]; then
    echo "mpi-clients: FAIL: no MPICH test ran under the shim as it comes" >&2
    bad=1
  fi
  # Calls served, and none forwarded because the shim could not serve them.
  if [ "${served:-0}" -eq 0 ]; then
    echo "mpi-clients: FAIL: the shim served no call in MPICH's tests" >&2
    bad=1
  fi
  if grep -E '^STAT .*(no rcoll communicator|MPI_Init not seen)' "$log" >&2; then
    echo "mpi-clients: FAIL: calls forwarded because the shim could not serve them (above)" >&2
    bad=1
  fi
  return $bad
}

# --- (b) mpi4py's collective tests ----------------------------------------------------
mpi4py_version=4.1.2
mpi4py_venv=$work/venv

# Downloads mpi4py's sdist and builds it against the mpicc on PATH (Open MPI's) into a venv
# of its own; unpacks its tests. Quiet: its log is $work/mpi4py-build.log.
build_mpi4py() {
  local venv=$mpi4py_venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/python" -c 'import mpi4py' 2>/dev/null; then
    rm -rf "$work/mpi4py-sdist" && mkdir -p "$work/mpi4py-sdist"
    # --no-binary for mpi4py alone: with :all: pip also built its build dependencies
    # (Cython) from source to read the sdist's metadata, 15 minutes here.
    "$venv/bin/pip" download -q --no-deps --no-binary mpi4py -d "$work/mpi4py-sdist" \
      "mpi4py==$mpi4py_version"
    MPICC=mpicc "$venv/bin/pip" install -q --no-cache-dir "$work"/mpi4py-sdist/mpi4py-*.tar.gz
  fi
  local tests=$work/mpi4py-tests
  if [ ! -d "$tests" ]; then
    rm -rf "$work/mpi4py-src" && mkdir -p "$work/mpi4py-src"
    tar -xzf "$work"/mpi4py-sdist/mpi4py-*.tar.gz -C "$work/mpi4py-src" --wildcards '*/test/*'
    mv "$work"/mpi4py-src/mpi4py-*/test "$tests"
    rm -rf "$work/mpi4py-src"
  fi
}

mpi4py_suite() {
  local venv=$mpi4py_venv tests=$work/mpi4py-tests
  if [ -n "${mpi4py_build:-}" ]; then
    wait "$mpi4py_build" || { cat "$work/mpi4py-build.log" >&2; return 1; }
  else
    build_mpi4py >"$work/mpi4py-build.log" 2>&1 || { cat "$work/mpi4py-build.log" >&2; return 1; }
  fi
  say "mpi4py $("$venv/bin/python" -c 'import mpi4py; print(mpi4py.__version__)') built against $("$venv/bin/python" -c 'from mpi4py import MPI; print(MPI.Get_library_version().replace(chr(0), "").splitlines()[0])')"
  local modules=()
  mapfile -t modules < <(cd "$tests" && ls test_cco_*.py | sed 's/\.py$//')
  local bad=0 np out rc
  for np in 2 4; do
    rc=0
    out=$(cd "$tests" && timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$np" \
      -x "LD_PRELOAD=$shim" -x RCOLL_MPI_STATS=1 -x RCOLL_TIMEOUT=30 -x RCOLL_MPI_SHM_MIN=0 \
      "$venv/bin/python" -m unittest "${modules[@]}" 2>&1 </dev/null) || rc=$?
    local summary
    summary=$(grep -E '^(Ran [0-9]+ tests|OK|FAILED)' <<<"$out" | sort | uniq -c | tr -s ' ' | paste -sd';')
    say "mpi4py ${modules[*]} on $np ranks under the shim: exit $rc; $summary"
    grep '^rcoll-mpi: MPI_' <<<"$out" | sed 's/^/  /'
    if [ $rc != 0 ] || ! grep -q '^OK' <<<"$out"; then
      echo "mpi-clients: FAIL: mpi4py's tests on $np ranks under the shim:" >&2
      tail -n 60 <<<"$out" >&2
      bad=1
    elif ! grep -qE '^rcoll-mpi: MPI_Allreduce: [1-9][0-9]* served' <<<"$out"; then
      echo "mpi-clients: FAIL: mpi4py's tests on $np ranks: no MPI_Allreduce served" >&2
      bad=1
    fi
  done
  return $bad
}

# --- (d) MPI_Alloc_mem memory zero-copy over verbs, in the Soft-RoCE VM -------------------
verbs_suite() {
  local built bin
  built=$(cargo test -p rcoll-mpi --test mpi_programs --no-run 2>&1) || { echo "$built" >&2; return 1; }
  bin=$(grep -o 'target/[^ )]*/mpi_programs-[0-9a-f]*' <<<"$built" | tail -n 1)
  [ -x "$bin" ] || { echo "mpi-clients: no mpi_programs test binary" >&2; return 1; }
  # The shim that binary was built with (no cargo inside the VM, where it is slow).
  cargo build -q -p rcoll-mpi
  RCOLL_MPI_SHIM=$root/target/debug/librcoll_mpi.so RCOLL_VM_TIMEOUT=${RCOLL_VM_TIMEOUT:-900} \
    RCOLL_VM_CPU_MODEL=${RCOLL_VM_CPU_MODEL:-max,erms=off,fsrm=off} \
    soft-roce/run-in-vm.sh "$bin --ignored --test-threads=1 mpi_alloc_mem_memory_goes_zero_copy_over_verbs"
}

# --- (c) the shim for Debian's MPICH ----------------------------------------------------
mpich_shim_suite() {
  # In target/ like the rest: only rcoll-mpi is built again (its build script reads
  # RCOLL_MPICC), and again for Open MPI at the next build that asks for it.
  env -u RCOLL_MPI_SHIM RCOLL_MPICC=mpicc.mpich RCOLL_MPIEXEC=mpiexec.mpich cargo test -q -p rcoll-mpi
}

status=0
if [[ " ${stages[*]} " == *" mpi4py "* ]]; then
  build_mpi4py >"$work/mpi4py-build.log" 2>&1 &
  mpi4py_build=$!
fi
for s in "${stages[@]}"; do
  case $s in
    mpich) mpich_suite || status=1 ;;
    mpi4py) mpi4py_suite || status=1 ;;
    mpich-shim) mpich_shim_suite || status=1 ;;
    verbs) verbs_suite || status=1 ;;
    *) echo "mpi-clients: unknown stage $s" >&2; exit 2 ;;
  esac
  say "$s done"
done
exit $status
