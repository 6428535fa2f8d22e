#!/usr/bin/env bash
# `rbee bench-sd` on SD3 random-weight models, at the tiny configs of
# tests/data/sd3/pipelines/sd3 (--random-from; the sd3m preset is the same
# path at SD3-medium's configs, too large for CI): the JSON names the MMDiT
# and reports its step, the T5 encode, the VAE decode and the image; the
# default is 28 steps; --no-t5 leaves the T5 out; usage errors exit 2.
# usage: test_sd3_bench_cli.sh RBEE_BINARY SOURCE_DIR
set -u
RBEE=$1
MODEL=$2/tests/data/sd3/pipelines/sd3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# check JSON_FILE PYTHON_CONDITION (r: the parsed object)
check() {
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"
}

if "$RBEE" bench-sd --random-from "$MODEL" -W 64 -H 64 --reps 1 --t5-tokens 16 --json >"$TMP/a.json" 2>"$TMP/err"; then
    check "$TMP/a.json" "r['denoiser'] == 'mmdit' and r['steps'] == 28 and r['t5_tokens'] == 16 and
        r['unet_batch2_ms_median'] > 0 and r['t5_ms_median'] > 0 and r['vae_decode_ms_median'] > 0 and
        r['image_ms'] > r['denoise_ms'] > 0 and r['text_ms'] > 0 and r['width'] == 64 and r['weight_bytes'] > 0" &&
        ok "bench-sd --random-from: MMDiT, T5, VAE, 28-step image" || fail "JSON: $(cat "$TMP/a.json")"
else
    fail "bench-sd --random-from: $(cat "$TMP/err")"
fi
if "$RBEE" bench-sd --random-from "$MODEL" -W 64 -H 64 --reps 1 --steps 1 --no-t5 --act-dtype f16 --json \
    >"$TMP/b.json" 2>"$TMP/err"; then
    check "$TMP/b.json" "r['t5_tokens'] == 0 and r['t5_ms_median'] == 0 and r['steps'] == 1 and r['act_dtype'] == 'f16'" &&
        ok "--no-t5, --steps 1, --act-dtype f16" || fail "JSON: $(cat "$TMP/b.json")"
else
    fail "bench-sd --no-t5: $(cat "$TMP/err")"
fi
"$RBEE" bench-sd --random-from "$MODEL" --steps 0 --reps 1 -W 64 -H 64 2>"$TMP/err" &&
    grep -q "MMDiT, batch 2, 8x8 latents" "$TMP/err" && grep -q "T5 encoder, 256 tokens" "$TMP/err" &&
    ok "text report" || fail "text report: $(cat "$TMP/err")"

usage() { # usage EXPECTED_STATUS ARGS...
    local want=$1
    shift
    "$RBEE" bench-sd "$@" >/dev/null 2>"$TMP/err"
    local got=$?
    [ "$got" = "$want" ] && ok "bench-sd $* -> $want" || fail "bench-sd $*: exit $got, $(cat "$TMP/err")"
}
usage 2 --random sd3m --random-from "$MODEL"
usage 2 --random-from "$MODEL" --t5-tokens 0
usage 2 --random-from "$MODEL" --t5-tokens 513
usage 1 --random sd3
usage 1 --random-from "$TMP"

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
