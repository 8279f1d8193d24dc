#!/usr/bin/env bash
# Builds librcoll (release) and installs it under a prefix with its header and a
# pkg-config file:
#
#   capi/install.sh [PREFIX]            # default /usr/local
#   cc prog.c $(pkg-config --cflags --libs rcoll)
#
# (For a prefix pkg-config does not search by default, export
# PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, and LD_LIBRARY_PATH=PREFIX/lib to run; or link
# statically: `pkg-config --static --libs rcoll` with -l:librcoll.a.)
# RCOLL_PROFILE=debug installs the debug build instead (for tests).
set -euo pipefail
prefix=${1:-/usr/local}
profile=${RCOLL_PROFILE:-release}
cd "$(dirname "$0")/.."
case "$profile" in
  release) cargo build --release -p rcoll-capi; built=target/release ;;
  debug) cargo build -p rcoll-capi; built=target/debug ;;
  *) echo "RCOLL_PROFILE=$profile: release or debug" >&2; exit 2 ;;
esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$built/librcoll.so" "$prefix/lib/librcoll.so"
install -m 0644 "$built/librcoll.a" "$prefix/lib/librcoll.a"
install -m 0644 capi/include/rcoll.h "$prefix/include/rcoll.h"
cat > "$prefix/lib/pkgconfig/rcoll.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: rcoll
Description: Collective communication for CPU memory over RDMA verbs, shared memory and TCP
Version: $version
Libs: -L\${libdir} -lrcoll
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I\${includedir}
PC
echo "installed librcoll $version ($profile) under $prefix"
