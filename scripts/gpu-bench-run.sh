#!/usr/bin/env bash
# Model-level GPU benchmarks for the lent GPU machine (through the device
# tool): builds only the `rbee` tool with RBEE_CUDA=ON for sm_90, then runs
# `rbee bench` on random-weight models of real shapes (Llama-3.2-1B and
# Llama-2-7B) in bf16, Q8_0 and Q4_0: pp512 and tg128 (llama-bench's
# definitions) and, for 1B, batched decode of 1/4/8/16 sequences (what the
# worker's continuous batching runs). JSON results go to $OUT.
# Build dependencies travel as .deb files in .cache/gpu-debs (see
# scripts/gpu-device-run.sh). Usage: scripts/gpu-bench-run.sh
set -uo pipefail
OUT=${OUT:-/tmp/rbee-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/bench-run.log") 2>&1
SECONDS=0
step() { echo "=== [$SECONDS s] $*"; }
step machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
if ! pkg-config --exists jansson cmocka libpcre2-8 2>/dev/null; then
  SYS=/tmp/rbee-sysroot
  mkdir -p $SYS
  for f in .cache/gpu-debs/*.deb; do dpkg -x "$f" $SYS; done
  export LD_LIBRARY_PATH=$SYS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG=$SYS/usr/bin/pkgconf
  export PKG_CONFIG_LIBDIR=$SYS/usr/lib/x86_64-linux-gnu/pkgconfig:$SYS/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$SYS
fi
step "configure + build rbee (sm_90)"
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DRBEE_TESTS=OFF -DRBEE_WORKERS=OFF -DRBEE_WERROR=OFF > "$OUT/bench-configure.log" 2>&1 || { tail -20 "$OUT/bench-configure.log"; exit 1; }
ninja -C build-bench -j16 rbee_cli > "$OUT/bench-build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/bench-build.log" | head -30; exit 1; }
RBEE=build-bench/apps/rbee/rbee
step "build done"
export TMPDIR=/tmp
for t in bf16 q8_0 q4_0; do
  step "llama-3.2-1b $t"
  timeout 150 $RBEE bench --random llama-3.2-1b --type $t --backend cuda:0 -p 512 -n 128 -r 3 \
    --parallel 1,4,8,16 --json > "$OUT/bench-1b-$t.json" || echo "FAILED 1b $t"
  grep -E '"test"|median' "$OUT/bench-1b-$t.json" | paste - - | sed 's/  */ /g' | cut -c1-160
done
for t in bf16 q8_0 q4_0; do
  step "llama-2-7b $t"
  timeout 200 $RBEE bench --random llama-2-7b --type $t --backend cuda:0 -p 512 -n 128 -r 2 --json \
    > "$OUT/bench-7b-$t.json" || echo "FAILED 7b $t"
  grep -E '"test"|median' "$OUT/bench-7b-$t.json" | paste - - | sed 's/  */ /g' | cut -c1-160
done
step done
