#!/usr/bin/env bash
# Worker benchmark for the lent GPU machine: builds llm-worker-rbee with
# RBEE_CUDA=ON (sm_90) and measures aggregate decode tokens/s at --parallel
# 1, 4, 8, 16 on cuda:0 with tools/bench/worker_parallel.py (the bundled
# default model unless RBEE_BENCH_MODEL is set). Build dependencies travel as
# .deb files: .cache/gpu-debs (jansson, cmocka, pcre2, pkgconf) and
# .cache/srv-debs (libmicrohttpd, libcurl headers); libcurl itself and
# gnutls come from the machine when it has them.
set -uo pipefail
OUT=${OUT:-/tmp/rbee-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/worker-bench.log") 2>&1
SECONDS=0
step() { echo "=== [$SECONDS s] $*"; }
SYS=/tmp/rbee-sysroot
LIB=$SYS/usr/lib/x86_64-linux-gnu
mkdir -p $SYS
for f in .cache/gpu-debs/*.deb .cache/srv-debs/libmicrohttpd*.deb .cache/srv-debs/libcurl4-openssl-dev*.deb; do
  dpkg -x "$f" $SYS
done
syscurl=$(ldconfig -p | awk '/libcurl.so.4 /{print $NF; exit}')
if [[ -n $syscurl ]]; then ln -sf "$syscurl" $LIB/libcurl.so; else dpkg -x .cache/srv-debs/libcurl4_*.deb $SYS; fi
ldconfig -p | grep -q libgnutls.so.30 || echo "warning: no libgnutls.so.30 on this machine"
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG=$SYS/usr/bin/pkgconf PKG_CONFIG_LIBDIR=$LIB/pkgconfig:$SYS/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$SYS
# libmicrohttpd.pc / libcurl.pc name their private dependencies (gnutls, zlib, ...) whose .pc files
# are not here; the shared libraries find theirs at run time, so empty stand-ins satisfy pkg-config
for pc in $LIB/pkgconfig/libmicrohttpd.pc $LIB/pkgconfig/libcurl.pc; do
  for dep in $(sed -n 's/^Requires[^:]*: *//p' "$pc" | tr ',' ' ' | grep -oE '[A-Za-z0-9_.+-]+' | grep -vE '^[0-9.]+$'); do
    $PKG_CONFIG --exists "$dep" 2>/dev/null || printf 'Name: %s\nDescription: stand-in\nVersion: 99\nLibs:\nCflags:\n' "$dep" > "$LIB/pkgconfig/$dep.pc"
  done
done
step "configure + build llm-worker-rbee (sm_90)"
cmake -S . -B build-wb -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DRBEE_TESTS=OFF -DRBEE_WERROR=OFF > "$OUT/wb-configure.log" 2>&1 || { tail -20 "$OUT/wb-configure.log"; exit 1; }
ninja -C build-wb -j16 llm-worker-rbee > "$OUT/wb-build.log" 2>&1 || { grep -E "error|FAILED|undefined" "$OUT/wb-build.log" | head -30; exit 1; }
W=build-wb/apps/llm-worker-rbee/llm-worker-rbee
ldd $W | grep -E "not found|curl|microhttpd|gnutls"
step "worker on cuda:0"
python3 tools/bench/worker_parallel.py $W --backend cuda --device 0 ${RBEE_BENCH_MODEL:+--model $RBEE_BENCH_MODEL} --max-tokens 128
step done
