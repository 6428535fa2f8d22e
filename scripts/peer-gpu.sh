#!/usr/bin/env bash
# rbee beside llama.cpp on the GPU machine, same GGUF files, same call.
#
#   scripts/peer-gpu.sh LLAMA_SRC.tar.xz RBEE_BIN SHAPE TYPES...
#
# Builds llama.cpp's CUDA tools from a source tarball (peers.md: the commit
# node-llama-cpp ships), then for each type writes one random-weight GGUF of
# SHAPE (tools/bench/make_random_gguf.py: dense llama shapes, qwen3-30b-a3b,
# mixtral-8x7b and their -tiny versions) and runs llama-bench -ngl 99 -fa 1
# and rbee bench --backend cuda:0 on it, interleaved (-p 512 -n 128 -r 3). It
# prints one table of median tokens/s with the ratios, and one of the seconds
# each stage took. F16, Q8_0 and Q4_K_M are written directly (Q4_K_M with
# the per-tensor types llama-quantize's mix picks); other types are quantized
# with llama-quantize (K-quants: its default mixes; Q4_0 --pure) from the F16
# file where it takes under a third of the disk, else (the MoE shapes' F16
# files are 61 and 93 GB) from the Q8_0 file with --allow-requantize. The
# llama.cpp build and the files stay in $PEER_DIR (default /tmp/peer-gpu) for
# a later call on the same machine; before a file is written, older ones are
# deleted (least recently used first) until it fits with 2 GB to spare. Logs
# and JSON go to $OUT (or /tmp/peer-out). With no TYPES, only llama.cpp is
# built.
set -u
SRC=$1 RBEE=$2 SHAPE=$3; shift 3
TYPES=("$@")
OUTD=${OUT:-/tmp/peer-out}
W=${PEER_DIR:-/tmp/peer-gpu}
mkdir -p "$OUTD" "$W"
GEN="python3 $(dirname "$0")/../tools/bench/make_random_gguf.py"
SECONDS=0
if [[ ! -x "$W/build/bin/llama-bench" ]]; then
  echo "=== [$SECONDS s] building llama.cpp (CUDA, sm_90)"
  [[ -f "$W/src/CMakeLists.txt" ]] || { mkdir -p "$W/src" && tar -C "$W/src" -xJf "$SRC"; } || exit 1
  cmake -S "$W/src" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$OUTD/llama-cmake.log" 2>&1 ||
    { tail -20 "$OUTD/llama-cmake.log"; exit 1; }
  ninja -C "$W/build" -j"$(nproc)" llama-bench llama-quantize llama-batched-bench \
    >"$OUTD/llama-build.log" 2>&1 || { grep -m5 -B2 -A8 "error" "$OUTD/llama-build.log"; exit 1; }
  echo "=== [$SECONDS s] llama.cpp built"
fi
LB=$W/build/bin
[[ ${#TYPES[@]} -gt 0 ]] || exit 0

direct() { [[ $1 == F16 || $1 == Q8_0 || $1 == Q4_K_M ]]; }
fsize() { $GEN x --shape "$SHAPE" --type "$1" --print-size; }

# make_room BYTES KEEP...: delete GGUF files in $W, least recently used first, except KEEP, until BYTES + 2 GB are free
make_room() {
  local need=$1 f g
  shift
  while (($(df --output=avail -B1 "$W" | tail -1) < need + (2 << 30))); do
    f=
    for g in $(find "$W" -maxdepth 1 -name '*.gguf' -printf '%T@ %p\n' | sort -n | cut -d' ' -f2-); do
      [[ " $* " == *" $g "* ]] || { f=$g; break; }
    done
    [[ -n $f ]] || { echo "peer: no room for $((need >> 30)) GiB in $W ($(df -h --output=avail "$W" | tail -1) free)"; return 1; }
    echo "=== [$SECONDS s] deleting $f for room"
    rm -f "$f"
  done
}

# write TYPE FILE: the random GGUF of $SHAPE in TYPE, directly or through llama-quantize
write() {
  local ty=$1 f=$2
  if direct "$ty"; then
    make_room "$(fsize "$ty")" || return 1
    echo "=== [$SECONDS s] writing $f"
    $GEN "$f.part" --shape "$SHAPE" --type "$ty" && mv "$f.part" "$f"
    return
  fi
  # from the F16 file where it takes under a third of the disk (dense shapes), else from the Q8_0 file
  local srcty=F16 req=() src
  if (($(fsize F16) * 3 > $(df --output=size -B1 "$W" | tail -1))); then srcty=Q8_0 req=(--allow-requantize); fi
  src=$W/$SHAPE-$srcty.gguf
  if [[ ! -s $src ]]; then write $srcty "$src" || return 1; fi
  local pure=()
  [[ $ty == Q4_0 ]] && pure=(--pure)
  make_room "$(($(stat -c %s "$src") * 8 / 10))" "$src" || return 1
  local qa=("${req[@]}" "${pure[@]}")
  echo "=== [$SECONDS s] llama-quantize" "${qa[@]}" "$(basename "$src") -> $ty"
  if ! "$LB/llama-quantize" "${qa[@]}" "$src" "$f.part" "$ty" >"$OUTD/quantize-$SHAPE-$ty.log" 2>&1; then
    tail -5 "$OUTD/quantize-$SHAPE-$ty.log"
    return 1
  fi
  mv "$f.part" "$f"
}

declare -a ROWS=() TIMES=()
for ty in "${TYPES[@]}"; do
  f=$W/$SHAPE-$ty.gguf
  t0=$SECONDS
  if [[ ! -s $f ]]; then
    rm -f "$W"/*.part
    write "$ty" "$f" || continue
  fi
  t1=$SECONDS
  touch "$f"
  cat "$f" >/dev/null
  t2=$SECONDS
  echo "=== [$SECONDS s] $ty ($(($(stat -c %s "$f") >> 20)) MiB): llama-bench"
  timeout 450 "$LB/llama-bench" -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json \
    >"$OUTD/llama-$SHAPE-$ty.json" 2>"$OUTD/llama-$SHAPE-$ty.err" || tail -3 "$OUTD/llama-$SHAPE-$ty.err"
  t3=$SECONDS
  echo "=== [$SECONDS s] $ty: rbee bench"
  timeout 450 "$RBEE" bench -m "$f" --backend cuda:0 -p 512 -n 128 -r 3 --json \
    >"$OUTD/rbee-$SHAPE-$ty.json" 2>"$OUTD/rbee-$SHAPE-$ty.err" || tail -3 "$OUTD/rbee-$SHAPE-$ty.err"
  t4=$SECONDS
  ROWS+=("$ty")
  TIMES+=("| $ty | $(($(stat -c %s "$f") >> 20)) | $((t1 - t0)) | $((t2 - t1)) | $((t3 - t2)) | $((t4 - t3)) |")
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
echo "| $SHAPE | MiB | write s | read s | llama-bench s | rbee bench s |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${TIMES[@]}"
echo "=== [$SECONDS s] done"
