#!/usr/bin/env bash
# The one script the lent GPU machine runs (through the device tool), from the
# repository root: builds rbee with RBEE_CUDA=ON for sm_90 only (compile time),
# runs the GPU op tests and the Hugging Face reference model tests on cuda:0,
# then the benchmarks (op bandwidth/GEMM rate, and pp512/tg128 on random-weight
# Llama-3.2-1B and Llama-2-7B folders generated there). Logs go to $OUT.
# That machine has no package registry: the Debian packages the build needs
# (jansson, cmocka, pcre2, pkgconf) travel as .deb files in .cache/gpu-debs and
# are unpacked into a private sysroot, never into /.
# Usage: scripts/gpu-device-run.sh [tests|bench|all] (default all)
set -uo pipefail
MODE=${1:-all}
OUT=${OUT:-/tmp/rbee-gpu-out}
mkdir -p "$OUT"
LOG=$OUT/device.log
exec > >(tee -a "$LOG") 2>&1
SECONDS=0
step() { echo "=== [$SECONDS s] $*"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,driver_version --format=csv || true
nvcc --version | tail -2

# ---- build dependencies ----
if ! pkg-config --exists jansson cmocka libpcre2-8 2>/dev/null; then
  step "unpacking carried build dependencies"
  SYS=/tmp/rbee-sysroot
  mkdir -p $SYS
  for f in .cache/gpu-debs/*.deb; do dpkg -x "$f" $SYS; done
  export LD_LIBRARY_PATH=$SYS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG=$SYS/usr/bin/pkgconf
  export PKG_CONFIG_LIBDIR=$SYS/usr/lib/x86_64-linux-gnu/pkgconfig:$SYS/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$SYS
  $PKG_CONFIG --modversion jansson cmocka libpcre2-8 || { echo "dependencies unusable"; exit 1; }
fi
# The HTTP workers (libmicrohttpd, libcurl) are not needed here: leave them
# out when their libraries are missing.
WORKERS=ON
${PKG_CONFIG:-pkg-config} --exists libmicrohttpd libcurl 2>/dev/null || WORKERS=OFF

step "configure + build (sm_90)"
BUILD=build-device
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DRBEE_WORKERS=$WORKERS -DRBEE_WERROR=OFF > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
TARGETS="test_gpu_backend test_gpu_ops test_gpu_matmul test_gpu_attention test_hf_reference bench_gpu"
ninja -C $BUILD -j16 $TARGETS > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
step "build done"

declare -A RES
if [[ $MODE == all || $MODE == tests ]]; then
  for t in test_gpu_backend test_gpu_ops test_gpu_matmul test_gpu_attention; do
    step "$t"
    if timeout 300 $BUILD/tests/gpu/$t > "$OUT/$t.log" 2>&1; then RES[$t]=PASS; else RES[$t]=FAIL; fi
    grep -E "FAILED|SKIPPED|rel L2 .* \(bound|OOM|device 0|error|Failure" "$OUT/$t.log" | head -20
    tail -3 "$OUT/$t.log"
  done
  step "test_hf_reference on cuda:0"
  if RBEE_TEST_BACKEND=cuda:0 timeout 300 $BUILD/tests/models/test_hf_reference > "$OUT/test_hf_reference.log" 2>&1; then
    RES[hf_reference_cuda]=PASS; else RES[hf_reference_cuda]=FAIL; fi
  cat "$OUT/test_hf_reference.log" | tail -25
  if command -v compute-sanitizer >/dev/null; then
    step "compute-sanitizer memcheck (ops, attention)"
    for t in test_gpu_ops test_gpu_attention; do
      if timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/tests/gpu/$t > "$OUT/sanitizer_$t.log" 2>&1; then
        RES[memcheck_$t]=PASS; else RES[memcheck_$t]=FAIL; fi
      tail -4 "$OUT/sanitizer_$t.log"
    done
  fi
fi

if [[ $MODE == all || $MODE == bench ]]; then
  step "bench ops"
  timeout 240 $BUILD/tests/gpu/bench_gpu ops cuda:0 | tee "$OUT/bench.jsonl"
  COPY=$(grep '"copy"' "$OUT/bench.jsonl" | sed 's/.*"GBps":\([0-9.]*\).*/\1/')
  python3 -c "import torch;a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16);b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16);
import time
for _ in range(3): a@b
torch.cuda.synchronize();t=time.time()
for _ in range(10): a@b
torch.cuda.synchronize();dt=(time.time()-t)/10;print('{\"bench\":\"torch_bf16_gemm\",\"TFLOPs\":%.0f}'%(2*8192**3/dt/1e12))" | tee -a "$OUT/bench.jsonl"
  for m in llama3.2-1b llama2-7b; do
    step "model $m: generate"
    timeout 240 python3 tests/gpu/gen_random_llama.py $m /tmp/models/$m bf16 || continue
    step "model $m: bench"
    timeout 240 $BUILD/tests/gpu/bench_gpu model cuda:0 /tmp/models/$m "$COPY" | tee -a "$OUT/bench.jsonl"
    rm -rf /tmp/models/$m
  done
fi

step "summary"
for k in "${!RES[@]}"; do printf '%-28s %s\n' "$k" "${RES[$k]}"; done | sort
[[ -f $OUT/bench.jsonl ]] && cat "$OUT/bench.jsonl"
