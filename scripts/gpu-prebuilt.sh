#!/usr/bin/env bash
# The one entry point for work on the lent GPU machine: build here, run there
# (through the device tool, billed by the second, so that machine spends no
# time compiling). `scripts/gpu-prebuilt.sh --help` prints this text.
#
# Here:   scripts/gpu-prebuilt.sh pack [PREFIX]
#   builds the CUDA flavour (sm_90, PREFIX-cuda; default build/dev-cuda) and
#   the HIP-on-NVIDIA flavour of the ROCm backend (sm_90, PREFIX-hipnv;
#   default build/gpu-hipnv) and packs the GPU test programs (ctest label
#   gpu: tests/gpu and test_hf_reference; the list travels as gpu-tests.txt)
#   and (CUDA only) bench_gpu, bench_sd, rbee, llm-worker-rbee and
#   sd-worker-rbee into .cache/dev/{cuda,hipnv}.tar.xz (xz -9: the binaries
#   share most bytes);
#   downloads the runtime .debs (jansson, cmocka, pcre2, libmicrohttpd,
#   libcurl and its libraries, libpng, libjpeg, zlib) into .cache/gpu-debs, which travels too.
#   The SD network tests read the diffusers fixtures from $RBEE_FIXTURES_DIR
#   (a copy of the parts they need, carried with the call; the tracked tree
#   is ~22 MiB once models/default/hf/model.safetensors is set aside).
# There: scripts/gpu-prebuilt.sh run STEP... with STEP one of
#   tests      every GPU test program (gpu-tests.txt) on cuda:0 (ONLY="prog ..." for
#              some of them, also in hipnv and sdops)
#   hipnv      the same on rocm:0 (ROCm backend's HIP host path, HIP_NVIDIA)
#   sdops      the SD op and network tests alone (label sd), on cuda:0 and rocm:0
#   sd         bench_sd: SD1.5 UNet step (batch 2, 64x64, f16) with its per-op
#              breakdown, the same with rbee's own convolution kernels instead of
#              cuDNN (--own-conv), and the SDXL step (128x128, f16);
#              SD_BENCH="ARGS;ARGS..." replaces the list (SD3-medium's MMDiT step:
#              SD_BENCH="--preset sd3m --dtype f16"; sd35m for SD3.5-medium)
#   sd3        rbee bench-sd --random sd3m on cuda:0 (SD3-medium random weights,
#              f16, 1024x1024): MMDiT step at batch 2 with 77 + 256 tokens, T5-XXL
#              encode of 256 tokens, VAE decode, the 28-step CFG-7 image, as
#              tools/sd3_fixtures/gen_sd3_fixtures.py --speed times diffusers;
#              SD3_BENCH="ARGS" adds to its flags (e.g. --random sd35m)
#   sdworker   sd-worker-rbee's images per minute at 512x512, 20 steps, f16 on cuda:0
#              through its HTTP API (rbee jobs one by one and queued, A1111 txt2img)
#              beside the engine alone (rbee bench-sd --random sd15, same settings):
#              tools/bench/sd_worker_bench.py; SD_WORKER_BENCH="ARGS" adds to its flags
#   memcheck   compute-sanitizer memcheck of the test programs labelled
#              memcheck (ops, attention, MoE, graph), the matrix-vector sweep and
#              the k-quant decode products (q6_K's reads around 2-byte aligned rows)
#   bench1b    rbee bench, Llama-3.2-1B shape, bf16/q8_0/q4_0, pp512 tg128,
#              batched decode 1/4/8/16, graphs on and off
#   bench7b    rbee bench, Llama-2-7B shape, bf16/q8_0/q4_0, pp512 tg128
#   det        the cost of deterministic batching (rbee bench --deterministic,
#              llm-worker-rbee --deterministic on): Llama-3.2-1B shape, q4_0 and
#              bf16, batched decode 1/4/8/16, with and without, same call
#   kquant     rbee bench of the k-quant files people download, Llama-3.2-1B
#              and Llama-2-7B shapes: q4_k_m and q5_k_m (llama-quantize's
#              default mixes: q6_K output, attn_v and ffn_down in an eighth
#              of the layers at each end and every third between) and q6_k,
#              beside q4_0, pp512 tg128
#   benchtl    rbee bench, TinyLlama-1.1B shape (CPU comparison shape) on cuda
#   ops        bench_gpu ops (matrix products per format, copy bandwidth)
#   q8         bench_gpu q8 (int8 tensor-core products of q4_0/q8_0/q4_K/q5_K/q6_K weights,
#              M = 1..256, at 4096x4096, 4096x14336, 2048x8192, beside the paths before
#              them, the first int8 kernel, the int8 kernel outside its rows and unsplit)
#   attn       bench_gpu attn (prefill and decode attention, auto and generic kernels;
#              then the diffusion shapes on att_fa.cuh and att_tc.cuh side by side)
#   worker     llm-worker-rbee on cuda:0 at --parallel 1/4/8/16
#              (tools/bench/worker_parallel.py; the bundled default model
#              unless RBEE_BENCH_MODEL names another)
#   serving    tools/bench/serving_bench.py on cuda:0: 32 streamed clients, 256 requests,
#              prompts 128:1024 and outputs 64:256 tokens (SERVING_BENCH="ARGS" replaces
#              these) on RBEE_BENCH_MODEL (default: the bundled model); with
#              LLAMA_SERVER=PATH the same seeded load against that llama-server
#              (-ngl 99 -fa on) after it, ratios side by side
#   prefix     llm-worker-rbee on cuda:0: time to first token of a prompt sharing a
#              ~2,000-token prefix with the one before, --cache-prompt on and off
#              (tools/bench/worker_prompt_cache.py; the model as for worker)
#   peaks      PyTorch's copy bandwidth and bf16 GEMM rate on the card (the
#              ceilings of docs/PERFORMANCE.md), where torch is installed
#   peer       rbee beside llama.cpp on the same GGUF files (scripts/peer-gpu.sh):
#              builds llama.cpp's CUDA tools from $PEER_SRC (default
#              .ref/llama.cpp-src-min.tar.xz, peers.md), writes a random file of
#              each shape in $PEER_SHAPES (default llama3.2-1b; also the MoE
#              shapes qwen3-30b-a3b, mixtral-8x7b, qwen3moe-tiny, mixtral-tiny) in
#              each type of $PEER_TYPES (default Q4_K_M Q5_K_M Q6_K Q4_0; F16, Q8_0
#              and Q4_K_M written directly, others by llama-quantize), pp512 tg128
#              of each, and the seconds each stage took
#   moe        bench_gpu moe (rb_matmul_id at Qwen3-30B-A3B, Mixtral-8x7B and
#              gpt-oss-20b shapes, decode to prefill; from 128 tokens the default
#              path beside each path forced (matrix-vector kernels, expert GEMMs),
#              at 512 the expert GEMMs in 32 MiB chunks too)
#   env:V=X    export V=X for the steps after it (and TAG=V-X names their bench
#              files), e.g. env:RBEE_NO_GRAPH=1 bench7b; env:V= unsets V
#   bf16_7b q8_0_7b q4_0_7b   one type of bench7b (bf16_1b ...: pp512 tg128 of the 1B shape;
#              also q4_k_m_7b q5_k_m_7b q4_k_7b q5_k_7b q6_k_7b and their _1b)
#   t:PROG     one GPU test program on cuda:0 (h:PROG: on rocm:0, the HIP flavour);
#              PROG_TIMEOUT=S limits each test program (default 300 s)
#   tgd:SHAPE:TYPE:D  tg128 of a random model after D tokens in the cache
#              (rbee bench -d D: decode at a real context length)
#   trace:SHAPE:TYPE  RBEE_GPU_TRACE of a short decode run (pp16 tg32) of a random
#              model (llama-2-7b, llama-3.2-1b) and its summary
#              (tools/bench/gpu_trace_summary.py): where a decode step's time goes;
#              TRACE_ARGS=--marks adds each mark's quartiles over the blocks
#   profile    per-kernel durations (ncu, clocks as found) of a Llama-2-7B
#              run (pp512 then 4 decode steps, graphs on, as in the middle of
#              tg128) for bf16/q8_0/q4_0 ($PROFILE_TYPES): raw CSV per type
#   ncuops     ncu sections of one launch of each direct matrix-vector kernel
#              ($NCU_KERNELS: other kernel name patterns, ';' between)
# RBEE_ALT=FILE.xz: another build's CUDA backend module (librbee-cuda.so, where
# the kernels are) in place of the packed one (an A/B of two builds in one call). Logs and JSON go to $OUT (packed into
# $OUT/logs.tgz); a summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
CMD=${1:-}
shift || true
if [[ $CMD == --help || $CMD == -h || $CMD == help ]]; then
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
  exit 0
fi

if [[ $CMD == pack ]]; then
  set -e
  BC=${1:+$1-cuda}
  BC=${BC:-build/dev-cuda}
  BH=${1:+$1-hipnv}
  BH=${BH:-build/gpu-hipnv}
  cmake -S . -B "$BC" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake -S . -B "$BH" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_HIP=ON -DRBEE_HIP_NVIDIA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  # the test programs the GPU machine runs: ctest labels gpu and memcheck
  tests_of() { ctest --test-dir "$BC" -N -L "$1" | sed -n 's/^ *Test *#[0-9]*: //p'; }
  T=$(tests_of '^gpu$')
  M=$(tests_of '^memcheck$')
  SD=$(tests_of '^sd$')
  [[ -n $T ]] || { echo "gpu-prebuilt: no test carries the ctest label gpu"; exit 1; }
  ninja -C "$BC" $T bench_gpu bench_sd rbee_cli llm-worker-rbee sd-worker-rbee rbee_cuda_module
  ninja -C "$BH" $T rbee_rocm_module
  rm -rf .cache/dev && mkdir -p .cache/dev/stage/cuda .cache/dev/stage/hipnv .cache/dev/stage/lib/rbee
  # the GPU backends are modules the programs load from ../lib/rbee (as installed)
  cp "$BC"/lib/rbee/librbee-cuda.so "$BH"/lib/rbee/librbee-rocm.so .cache/dev/stage/lib/rbee/
  for t in $T; do
    cp "$BC"/tests/*/$t .cache/dev/stage/cuda/
    cp "$BH"/tests/*/$t .cache/dev/stage/hipnv/
  done
  cp "$BC"/tests/gpu/bench_gpu "$BC"/tests/gpu/bench_sd "$BC"/apps/rbee/rbee \
    "$BC"/apps/llm-worker-rbee/llm-worker-rbee "$BC"/apps/sd-worker-rbee/sd-worker-rbee .cache/dev/stage/cuda/
  strip .cache/dev/stage/cuda/* .cache/dev/stage/hipnv/* .cache/dev/stage/lib/rbee/*
  for fl in cuda hipnv; do
    printf '%s\n' $T >.cache/dev/stage/$fl/gpu-tests.txt
    printf '%s\n' $M >.cache/dev/stage/$fl/memcheck-tests.txt
    printf '%s\n' $SD >.cache/dev/stage/$fl/sd-tests.txt
  done
  # one archive per flavour: the tracked tree (~47 MiB) leaves room for one at a time
  XZ_OPT=-9 tar -C .cache/dev/stage -cJf .cache/dev/cuda.tar.xz cuda lib/rbee/librbee-cuda.so
  XZ_OPT=-9 tar -C .cache/dev/stage -cJf .cache/dev/hipnv.tar.xz hipnv lib/rbee/librbee-rocm.so
  rm -rf .cache/dev/stage
  mkdir -p .cache/gpu-debs
  # with every library libcurl4 and libmicrohttpd load (ssh, rtmp, http2, psl, brotli, ldap,
  # kerberos, gnutls, openssl...): the GPU machine's image has other sonames for some of them;
  # only the C and C++ runtimes are the host's
  (cd .cache/gpu-debs && apt-get download libjansson4 libcmocka0 libpcre2-8-0 libmicrohttpd12 libcurl4 \
    libpng16-16 libjpeg62-turbo zlib1g libssh2-1 librtmp1 libnghttp2-14 libpsl5 libbrotli1 libldap-2.5-0 \
    libsasl2-2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libffi8 \
    libgmp10 libgnutls30 libhogweed6 libnettle8 libidn2-0 libp11-kit0 libtasn1-6 libunistring2 libzstd1 \
    libssl3 >/dev/null)
  ls -la .cache/dev .cache/gpu-debs
  exit 0
fi
[[ $CMD == run ]] || { echo "usage: $0 pack [PREFIX] | run STEP... | --help"; exit 2; }

# logs go to $OUT/raw and are packed into $OUT/logs.tgz at the end (the
# device tool returns at most 8 files)
TOP=${OUT:-/tmp/rbee-prebuilt-out}
OUT=$TOP/raw
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
SECONDS=0
step() { echo "=== [$SECONDS s] $*"; }
step machine
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
SYS=/tmp/rbee-sysroot
mkdir -p $SYS
for f in .cache/gpu-debs/*.deb; do dpkg -x "$f" $SYS; done
export LD_LIBRARY_PATH=$SYS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
# cuDNN (the pip package nvidia-cudnn-cu13 there): the CUDA backend loads
# libcudnn.so.9 at run time for rb_conv2d, and runs its own kernels without it
CUDNN_LIB=$(python3 -c 'import nvidia.cudnn as m, os
print(os.path.join(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0], "lib"))' 2>/dev/null) ||
  CUDNN_LIB=
if [[ -n $CUDNN_LIB && -e $CUDNN_LIB/libcudnn.so.9 ]]; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_LIB
  echo "cuDNN: $CUDNN_LIB"
else
  echo "cuDNN: not found (python's nvidia.cudnn): convolutions run rbee's own kernels"
fi
# NCCL (PyTorch's nvidia-nccl package there) for several devices: test_nccl
# requires it (RBEE_TEST_NCCL=1)
NCCL_LIB=$(python3 -c 'import nvidia.nccl as m, os
print(os.path.join(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0], "lib"))' 2>/dev/null) ||
  NCCL_LIB=
if [[ -n $NCCL_LIB && -e $NCCL_LIB/libnccl.so.2 ]]; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$NCCL_LIB RBEE_TEST_NCCL=1
  echo "NCCL: $NCCL_LIB"
fi
BIN=/tmp/rbee-bin
mkdir -p $BIN $BIN/share
# the programs find their data (the CLIP vocabulary, the bundled models) in
# ../share/rbee beside them, as in an install: this checkout
ln -sfn "$PWD" $BIN/share/rbee
for a in .cache/dev/*.tar.xz; do tar -C $BIN -xJf "$a" || exit 1; done
# RBEE_ALT=FILE.xz: another build's CUDA module (xz) in place of the packed one,
# for an A/B of two builds in one call (run the script once with it, once without)
if [[ -n ${RBEE_ALT:-} ]]; then xz -dc "$RBEE_ALT" >$BIN/lib/rbee/librbee-cuda.so || exit 1; fi
export RBEE_TEST_DATA_DIR=$PWD/tests/data TMPDIR=/tmp
declare -a SUMMARY=()
result() { SUMMARY+=("$(printf '%-40s %s' "$1" "$2")"); }

run_prog() { # flavour prog backend-spec [env...]
  local fl=$1 t=$2 spec=$3; shift 3
  step "$fl/$t on $spec"
  local log=$OUT/${fl}_$t.log rc
  env RBEE_TEST_GPU=$spec RBEE_TEST_BACKEND=$spec "$@" timeout "${PROG_TIMEOUT:-300}" $BIN/$fl/$t >"$log" 2>&1
  rc=$?
  grep -E "FAILED|Failure|error:|SKIPPED" "$log" | head -12
  tail -2 "$log"
  if [[ $rc -ne 0 ]]; then result "$fl/$t" "FAIL (exit $rc)"
  elif grep -q SKIPPED "$log"; then result "$fl/$t" "FAIL (skipped)"
  else result "$fl/$t" PASS; fi
}

only() { # ONLY="prog ..." keeps those of the test list GT
  [[ -n ${ONLY:-} ]] || return 0
  local keep=() t
  for t in "${GT[@]}"; do [[ " $ONLY " == *" $t "* ]] && keep+=("$t"); done
  GT=("${keep[@]}")
}

bench() { # shape type reps extra... ($TAG names a variant run with an environment switch)
  local shape=$1 ty=$2 reps=$3; shift 3
  local name=bench-$shape-$ty${TAG:+-$TAG}
  step "$name"
  timeout 280 $BIN/cuda/rbee bench --random "$shape" --type "$ty" --backend cuda:0 -p 512 -n 128 -r "$reps" \
    --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
  local rc=$?
  [[ $rc -eq 0 ]] || { result "$name" "FAIL (exit $rc)"; tail -3 "$OUT/$name.err"; return; }
  python3 - "$OUT/$name.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    name = r["test"] + (" x%d" % r["parallel"] if r["kind"] == "tgb" else "") + (" @ d%d" % r["depth"] if r.get("depth") else "") + (" eager" if r.get("eager") else "")
    print("  %-22s %10.1f t/s" % (name, r["median_ts"]))
EOF
  result "$name" ok
}

for s in "$@"; do
  case $s in
  tests) mapfile -t GT <$BIN/cuda/gpu-tests.txt; only; for t in "${GT[@]}"; do run_prog cuda "$t" cuda:0; done ;;
  hipnv) mapfile -t GT <$BIN/hipnv/gpu-tests.txt; only; for t in "${GT[@]}"; do run_prog hipnv "$t" rocm:0; done ;;
  sdops) mapfile -t GT <$BIN/cuda/sd-tests.txt; only
         for t in "${GT[@]}"; do run_prog cuda "$t" cuda:0; run_prog hipnv "$t" rocm:0; done ;;
  sd) IFS=';' read -ra sdargs <<<"${SD_BENCH:---preset sd15 --dtype f16 --ops;--preset sd15 --dtype f16 --own-conv;--preset sdxl --dtype f16}"
      for a in "${sdargs[@]}"; do
        step "bench_sd $a"
        timeout 280 $BIN/cuda/bench_sd cuda:0 $a --reps 10 2>&1 | tee -a "$OUT/bench_sd.log" | grep -v '^{'
        [[ ${PIPESTATUS[0]} -eq 0 ]] && result "bench_sd $a" ok || result "bench_sd $a" FAIL
      done ;;
  sd3)
    step "rbee bench-sd --random sd3m, 1024x1024, f16"
    # shellcheck disable=SC2086
    timeout 590 $BIN/cuda/rbee bench-sd --random sd3m --backend cuda:0 --act-dtype f16 --reps 5 ${SD3_BENCH:-} --json \
      2>"$OUT/bench_sd3.log" | tee "$OUT/bench_sd3.json"
    [[ ${PIPESTATUS[0]} -eq 0 ]] && result "bench-sd sd3m" ok || { tail -3 "$OUT/bench_sd3.log"; result "bench-sd sd3m" FAIL; } ;;
  sdworker)
    step "sd-worker-rbee: images per minute, 512x512, 20 steps, f16"
    # shellcheck disable=SC2086
    timeout 900 python3 tools/bench/sd_worker_bench.py $BIN/cuda/sd-worker-rbee $BIN/cuda/rbee --backend cuda \
      --device 0 --use-f16 --size 512 --steps 20 --images 10 --json "$OUT/sd_worker_bench.json" ${SD_WORKER_BENCH:-} \
      2>&1 | tee "$OUT/sd_worker_bench.log"
    [[ ${PIPESTATUS[0]} -eq 0 ]] && result "sd-worker-rbee bench" ok || result "sd-worker-rbee bench" FAIL ;;
  memcheck)
    mapfile -t MC <$BIN/cuda/memcheck-tests.txt
    for t in "${MC[@]}" "test_gpu_matmul test_matvec_sweep" "test_gpu_matmul test_matvec_kquant"; do
      step "memcheck $t"
      timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda/$t >"$OUT/memcheck_${t// /_}.log" 2>&1
      rc=$?; tail -3 "$OUT/memcheck_${t// /_}.log"
      [[ $rc -eq 0 ]] && result "memcheck $t" PASS || result "memcheck $t" "FAIL (exit $rc)"
    done ;;
  bench1b) for ty in bf16 q8_0 q4_0; do bench llama-3.2-1b $ty 3 --parallel 1,4,8,16 --compare-eager; done ;;
  bench7b) for ty in bf16 q8_0 q4_0; do bench llama-2-7b $ty 2; done ;;
  det) for ty in q4_0 bf16; do
         bench llama-3.2-1b $ty 3 -p 64 --parallel 1,4,8,16
         TAG=det bench llama-3.2-1b $ty 3 -p 64 --parallel 1,4,8,16 --deterministic
       done ;;
  kquant) for sh in llama-3.2-1b llama-2-7b; do for ty in q4_0 q4_k_m q5_k_m q6_k; do bench $sh $ty 2; done; done ;;
  bf16_7b|q8_0_7b|q4_0_7b|q4_k_m_7b|q5_k_m_7b|q4_k_7b|q5_k_7b|q6_k_7b) bench llama-2-7b "${s%_7b}" 2 ;;
  bf16_1b|q8_0_1b|q4_0_1b|q4_k_m_1b|q5_k_m_1b|q4_k_1b|q5_k_1b|q6_k_1b) bench llama-3.2-1b "${s%_1b}" 3 ;;
  t:*) run_prog cuda "${s#t:}" cuda:0 ;;
  h:*) run_prog hipnv "${s#h:}" rocm:0 ;;
  tgd:*:*:*) IFS=: read -r _ dsh dty dd <<<"$s"; TAG=${TAG:+$TAG-}d$dd bench "$dsh" "$dty" 2 -d "$dd" -p 0 ;;
  trace:*:*)
    IFS=: read -r _ tsh tty <<<"$s"
    tf=$OUT/trace-$tsh-$tty${TAG:+-$TAG}.txt
    step "trace $tsh $tty${TAG:+ ($TAG)}"
    RBEE_GPU_TRACE=$tf timeout 200 $BIN/cuda/rbee bench --random "$tsh" --type "$tty" --backend cuda:0 -p 16 -n 32 -r 1 \
      >/dev/null 2>"$tf.err" || { tail -3 "$tf.err"; result "trace $tsh $tty" FAIL; continue; }
    python3 tools/bench/gpu_trace_summary.py "$tf" --launches ${TRACE_ARGS:-} >"$tf.summary"
    sed -n '/^mean over/,$p' "$tf.summary"; head -1 "$tf.summary"
    xz -T4 "$tf"
    result "trace $tsh $tty" done ;;
  env:*=*) v=${s#env:}; step "env $v"
           if [[ -z ${v#*=} ]]; then unset "${v%%=*}"; unset TAG; else export "$v"; export TAG="${v%%=*}-${v#*=}"; fi ;;
  benchtl) for ty in q8_0 q4_0; do bench tinyllama-1.1b $ty 3; done ;;
  worker)
    step "worker on cuda:0"
    timeout 500 python3 tools/bench/worker_parallel.py $BIN/cuda/llm-worker-rbee --backend cuda --device 0 \
      --model "${RBEE_BENCH_MODEL:-models/default/rbee-default-q8_0.gguf}" --max-tokens 128 \
      >"$OUT/worker.txt" 2>&1
    rc=$?; cat "$OUT/worker.txt"
    [[ $rc -eq 0 ]] && result worker ok || result worker "FAIL (exit $rc)" ;;
  peer) for sh in ${PEER_SHAPES:-llama3.2-1b}; do
          step "peer $sh"
          OUT=$OUT scripts/peer-gpu.sh "${PEER_SRC:-.ref/llama.cpp-src-min.tar.xz}" $BIN/cuda/rbee "$sh" \
            ${PEER_TYPES:-Q4_K_M Q5_K_M Q6_K Q4_0} && result "peer $sh" ok || result "peer $sh" FAIL
        done ;;
  serving)
    step "serving benchmark on cuda:0${LLAMA_SERVER:+ beside llama-server}"
    sm=${RBEE_BENCH_MODEL:-models/default/rbee-default-q8_0.gguf}
    sargs=(--worker "$BIN/cuda/llm-worker-rbee --backend cuda --device 0 --model $sm")
    [[ -n ${LLAMA_SERVER:-} ]] && sargs+=(--llama-server "$LLAMA_SERVER -m $sm -ngl 99 -fa on" --compare)
    # shellcheck disable=SC2086
    timeout 580 python3 tools/bench/serving_bench.py "${sargs[@]}" \
      ${SERVING_BENCH:---clients 32 --requests 256 --prompt-len 128:1024 --output-len 64:256} \
      --json "$OUT/serving${TAG:+-$TAG}.json" 2>&1 | tee "$OUT/serving${TAG:+-$TAG}.txt"
    rc=${PIPESTATUS[0]}
    [[ $rc -eq 0 ]] && result serving ok || result serving "FAIL (exit $rc)" ;;
  prefix)
    step "worker prompt-prefix reuse on cuda:0"
    rc=0
    for cp in on off; do
      timeout 400 python3 tools/bench/worker_prompt_cache.py $BIN/cuda/llm-worker-rbee --backend cuda --device 0 \
        --model "${RBEE_BENCH_MODEL:-models/default/rbee-default-q8_0.gguf}" --cache-prompt $cp \
        >>"$OUT/prefix.txt" 2>&1 || rc=$?
    done
    cat "$OUT/prefix.txt"
    [[ $rc -eq 0 ]] && result prefix ok || result prefix "FAIL (exit $rc)" ;;
  peaks)
    step "PyTorch copy bandwidth and bf16 GEMM"
    timeout 200 python3 - <<'PY' 2>&1 | tee "$OUT/peaks.jsonl"
import json, time
import torch
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); t = time.time()
for _ in range(20): b.copy_(a)
torch.cuda.synchronize(); dt = (time.time() - t) / 20
print(json.dumps({"bench": "torch_copy", "GBps": round(2 * a.numel() / dt / 1e9, 1)}))
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); y = torch.randn_like(x)
for _ in range(3): x @ y
torch.cuda.synchronize(); t = time.time()
for _ in range(10): x @ y
torch.cuda.synchronize(); dt = (time.time() - t) / 10
print(json.dumps({"bench": "torch_bf16_gemm", "TFLOPs": round(2 * 8192 ** 3 / dt / 1e12)}))
PY
    [[ ${PIPESTATUS[0]} -eq 0 ]] && result peaks ok || result peaks "FAIL (no torch?)" ;;
  profile)
    for ty in ${PROFILE_TYPES:-bf16 q8_0 q4_0}; do
      step "ncu 7b $ty"
      timeout 280 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        $BIN/cuda/rbee bench --random llama-2-7b --type $ty --backend cuda:0 -p 512 -n 4 -r 1 \
        >"$OUT/ncu-7b-$ty.csv" 2>"$OUT/ncu-7b-$ty.err"
      rc=$?; tail -2 "$OUT/ncu-7b-$ty.err"
      [[ $rc -eq 0 ]] && result "ncu 7b $ty" ok || result "ncu 7b $ty" "FAIL (exit $rc)"
    done ;;
  ncuops) # one launch of each direct kernel at M = 1 (4096 x 11008; $NCU_KERNELS: other name patterns, ';' between)
    n=0
    IFS=';' read -ra ks <<<"${NCU_KERNELS:-k_mvd<.*mvd_float<.int.30>;k_mvd<.*mvd_q8_0_fmt>;k_mvd<.*mvd_q4_0_fmt>}"
    for k in "${ks[@]}"; do
      n=$((n + 1))
      step "ncu $k"
      RBEE_BENCH_QUICK=1 timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" \
        --launch-skip 20 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        $BIN/cuda/bench_gpu ops cuda:0 >"$OUT/ncu-ops-$n.txt" 2>&1
      grep -E "k_mvd|k_mv_x|Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Theoretical Occ|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Mem Busy|Max Bandwidth|Stall|stall" \
        "$OUT/ncu-ops-$n.txt" | head -40
    done
    result ncuops done ;;
  attn) step "bench_gpu attn${TAG:+ ($TAG)}"; timeout 200 $BIN/cuda/bench_gpu attn cuda:0 >"$OUT/bench_attn${TAG:+-$TAG}.jsonl"
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["bench"] == "attn_sd":
        print("  %-10s B %d H %2d Tq %5d Tk %5d D %3d  att_fa %9.2f us %6.1f TFLOP/s  att_tc %9.2f us %6.1f TFLOP/s  x%.2f" % (r["case"], r["B"], r["H"], r["Tq"], r["Tk"], r["D"], r["fa_us"], r["fa_TFLOPs"], r["tc_us"], r["tc_TFLOPs"], r["speedup"]))
    else:
        print("  %-8s Tq %5d Tk %5d H %2d/%2d pos %5d  %8.2f us" % (r["kernel"], r["Tq"], r["Tk"], r["Hq"], r["Hkv"], r["pos"], r["us"]))' "$OUT/bench_attn${TAG:+-$TAG}.jsonl"
    result attn done ;;
  moe) step "bench_gpu moe${TAG:+ ($TAG)}"; timeout 400 $BIN/cuda/bench_gpu moe cuda:0 >"$OUT/bench_moe${TAG:+-$TAG}.jsonl"
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); print("  %-14s %-4s %-5s T %3d  %-4s %9.1f us %7.1f GB/s  graph %9.1f us  %7.3f TFLOP/s  mv %9.1f us %7.3f TF  gemm %9.1f us %7.3f TF  chunk32 %9.1f us" % (r["shape"], r["part"], r["wtype"], r["T"], r["path"], r["us"], r["GBps"], r["graph_us"], r["TFLOPs"], r["mv_us"], r["mv_TFLOPs"], r["gemm_us"], r["gemm_TFLOPs"], r["chunk32_us"]))' "$OUT/bench_moe${TAG:+-$TAG}.jsonl"
    result moe done ;;
  q8) step "bench_gpu q8${TAG:+ ($TAG)}"; timeout 400 $BIN/cuda/bench_gpu q8 cuda:0 >"$OUT/bench_q8${TAG:+-$TAG}.jsonl"
    grep -v "^{" "$OUT/bench_q8${TAG:+-$TAG}.jsonl"; result "q8${TAG:+ ($TAG)}" done ;;
  ops) step "bench_gpu ops${TAG:+ ($TAG)}"; timeout 200 $BIN/cuda/bench_gpu ops cuda:0 >"$OUT/bench_ops${TAG:+-$TAG}.jsonl"
    grep -v "^{" "$OUT/bench_ops${TAG:+-$TAG}.jsonl"; result "ops${TAG:+ ($TAG)}" done ;;
  *) echo "unknown step $s"; result "$s" "FAIL (unknown step)" ;;
  esac
done
step summary
printf '%s\n' "${SUMMARY[@]}"
tar -C "$OUT" -czf "$TOP/logs.tgz" . && rm -rf "$OUT"
