#!/usr/bin/env bash
# Smoke-runs every libFuzzer target of a RBEE_FUZZ=ON build for SECONDS each
# (default 30), starting from generated seed corpora; exits non-zero if any
# target crashes, leaks or trips a sanitizer. Crash inputs are kept in
# BUILD_DIR/fuzz-artifacts/<target>/.
#   usage: tests/fuzz/run-smoke.sh BUILD_DIR [SECONDS]
set -u
BUILD=${1:?usage: run-smoke.sh BUILD_DIR [SECONDS]}
SECS=${2:-30}
FUZZ="$BUILD/tests/fuzz"
[ -x "$FUZZ/fuzz_gguf" ] || { echo "no fuzz targets in $FUZZ (configure with CC=clang -DRBEE_FUZZ=ON)" >&2; exit 2; }

CORPUS="$BUILD/fuzz-corpus"
"$FUZZ/fuzz_gen_seeds" "$CORPUS" "$(cd "$(dirname "$0")/../data" && pwd)" || exit 2

status=0
HERE=$(cd "$(dirname "$0")" && pwd)
cp "$HERE"/../data/image/*.png "$HERE"/../data/image/*.jpg "$CORPUS/image/" 2>/dev/null # hand-made PNG/JPEG seeds
run() { # target corpus-subdir max_len
    local t=$1 dir="$CORPUS/$2" max=$3 art="$BUILD/fuzz-artifacts/$1/" dict="$HERE/$2.dict"
    mkdir -p "$art"
    echo "== $t: ${SECS}s, max_len $max"
    if ! "$FUZZ/$t" "$dir" -max_total_time="$SECS" -max_len="$max" -rss_limit_mb=2048 -timeout=10 \
        -dict="$dict" -artifact_prefix="$art" -print_final_stats=1 >"$BUILD/fuzz-$t.log" 2>&1; then
        echo "!! $t FAILED, see $BUILD/fuzz-$t.log and $art" >&2
        tail -n 40 "$BUILD/fuzz-$t.log" >&2
        status=1
    else
        grep -E "stat::number_of_executed_units|cov:" "$BUILD/fuzz-$t.log" | tail -n 2
    fi
}
run fuzz_gguf gguf 65536
run fuzz_safetensors safetensors 16384
run fuzz_json_config json_config 16384
run fuzz_image image 65536
run fuzz_sd_config sd_config 16384
run fuzz_sd_ldm sd_ldm 65536
run fuzz_sd_gguf sd_gguf 65536
run fuzz_tokenizer_json tokenizer_json 16384
run fuzz_chat_template chat_template 16384
if [ -x "$FUZZ/fuzz_worker_request" ]; then run fuzz_worker_request worker_request 8192; fi
exit $status
