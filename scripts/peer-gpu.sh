#!/usr/bin/env bash
# rbee beside llama.cpp on the GPU machine, same GGUF files, same call.
#
#   scripts/peer-gpu.sh LLAMA_SRC.tar.xz RBEE_BIN SHAPE TYPES...
#
# Builds llama.cpp's CUDA tools from a source tarball (peers.md: the commit
# node-llama-cpp ships), writes one random-weight F16 GGUF of SHAPE
# (tools/bench/make_random_gguf.py), quantizes it with llama-quantize to each
# type (Q4_K_M, Q5_K_M, Q6_K: llama-quantize's default mixes; Q4_0, Q8_0 with
# --pure), then for each file runs llama-bench -ngl 99 -fa 1 and rbee bench
# --backend cuda:0, interleaved (-p 512 -n 128 -r 3), and prints one table of
# median tokens/s with the ratios. Logs and JSON go to $OUT (or /tmp/peer-out).
set -u
SRC=$1 RBEE=$2 SHAPE=$3; shift 3
TYPES=("$@")
OUTD=${OUT:-/tmp/peer-out}
mkdir -p "$OUTD" /tmp/peer-gpu
W=/tmp/peer-gpu
SECONDS=0
if [[ ! -x $W/build/bin/llama-bench ]]; then
  echo "=== [$SECONDS s] building llama.cpp (CUDA, sm_90)"
  [[ -f $W/src/CMakeLists.txt ]] || { mkdir -p $W/src && tar -C $W/src -xJf "$SRC"; } || exit 1
  cmake -S $W/src -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$OUTD/llama-cmake.log" 2>&1 ||
    { tail -20 "$OUTD/llama-cmake.log"; exit 1; }
  ninja -C $W/build -j"$(nproc)" llama-bench llama-quantize llama-batched-bench \
    >"$OUTD/llama-build.log" 2>&1 || { grep -m5 -B2 -A8 "error" "$OUTD/llama-build.log"; exit 1; }
fi
LB=$W/build/bin
F16=$W/$SHAPE-f16.gguf
if [[ ! -s $F16 ]]; then
  echo "=== [$SECONDS s] writing $F16"
  python3 "$(dirname "$0")/../tools/bench/make_random_gguf.py" "$F16" --shape "$SHAPE" || exit 1
fi
declare -a ROWS=()
for ty in "${TYPES[@]}"; do
  f=$W/$SHAPE-$ty.gguf
  if [[ ! -s $f ]]; then
    pure=(); [[ $ty == Q4_0 || $ty == Q8_0 ]] && pure=(--pure)
    echo "=== [$SECONDS s] llama-quantize ${pure[*]} $ty"
    $LB/llama-quantize "${pure[@]}" "$F16" "$f" "$ty" >"$OUTD/quantize-$ty.log" 2>&1 || { tail -5 "$OUTD/quantize-$ty.log"; continue; }
  fi
  cat "$f" >/dev/null
  echo "=== [$SECONDS s] $ty: llama-bench, rbee bench"
  $LB/llama-bench -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json >"$OUTD/llama-$SHAPE-$ty.json" 2>"$OUTD/llama-$SHAPE-$ty.err"
  "$RBEE" bench -m "$f" --backend cuda:0 -p 512 -n 128 -r 3 --json >"$OUTD/rbee-$SHAPE-$ty.json" 2>"$OUTD/rbee-$SHAPE-$ty.err"
  ROWS+=("$ty")
done
python3 - "$OUTD" "$SHAPE" "${ROWS[@]}" <<'EOF'
import json, sys
out, shape, types = sys.argv[1], sys.argv[2], sys.argv[3:]
def llama(ty):
    try:
        d = json.load(open(f"{out}/llama-{shape}-{ty}.json"))
    except Exception:
        return None, None
    pp = next((r["avg_ts"] for r in d if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0), None)
    tg = next((r["avg_ts"] for r in d if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0), None)
    return pp, tg
def rbee(ty):
    try:
        d = json.load(open(f"{out}/rbee-{shape}-{ty}.json"))
    except Exception:
        return None, None
    pp = next((r["median_ts"] for r in d["results"] if r["test"].startswith("pp")), None)
    tg = next((r["median_ts"] for r in d["results"] if r["test"].startswith("tg")), None)
    return pp, tg
f = lambda x: "-" if x is None else f"{x:,.1f}"
r = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}x"
print(f"| {shape} | llama.cpp pp512 | rbee pp512 | ratio | llama.cpp tg128 | rbee tg128 | ratio |")
print("|---|---|---|---|---|---|---|")
for ty in types:
    lp, lt = llama(ty)
    rp, rt = rbee(ty)
    print(f"| {ty} | {f(lp)} | {f(rp)} | {r(rp, lp)} | {f(lt)} | {f(rt)} | {r(rt, lt)} |")
EOF
echo "=== [$SECONDS s] done"
