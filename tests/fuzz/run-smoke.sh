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
failed=""
HERE=$(cd "$(dirname "$0")" && pwd)
cp "$HERE"/../data/image/*.png "$HERE"/../data/image/*.jpg "$CORPUS/image/" 2>/dev/null # hand-made PNG/JPEG seeds
# the SD worker's requests: the first byte picks the parser (fuzz_sd_request.c)
mkdir -p "$CORPUS/sd_request"
printf '\000{"prompt":"a cat","width":64,"height":64,"steps":4,"seed":1,"sampler":"dpmpp_2m_karras","mask":null}' >"$CORPUS/sd_request/rbee"
printf '\001{"prompt":"a (red:1.2) cat","sampler_name":"Euler a","n_iter":2,"override_settings":{"randn_source":"CPU"}}' >"$CORPUS/sd_request/a1111"
printf '\002{"init_images":["iVBORw0KGgo="],"denoising_strength":0.6,"mask_blur":0}' >"$CORPUS/sd_request/img2img"
printf '\002{"init_images":["1KGgo="],"denoising_strength":8.9e74,"mask_blur":0}' >"$CORPUS/sd_request/huge_number" # once cast to long long
printf '\003{"prompt":"x","n":2,"size":"64x64","response_format":"b64_json","output_format":"jpeg"}' >"$CORPUS/sd_request/openai"
printf '\004a cat\nNegative prompt: dog\nSteps: 20, Sampler: Euler, Size: 512x768, Note: "a, b"' >"$CORPUS/sd_request/infotext"
printf '\005data:image/png;base64,Zm9vYmFy' >"$CORPUS/sd_request/base64"
{ printf '\006'; cat "$HERE/../data/image/gray8_trns.png"; printf '\377\377a cat\37764'; } >"$CORPUS/sd_request/form"
# model output for the tool-call parser: the first byte picks the family (fuzz_tool_calls.c)
mkdir -p "$CORPUS/tool_calls"
printf '\001 {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name":"f","parameters":{}}' >"$CORPUS/tool_calls/llama"
printf '\202Hm.\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n<tool_call>{"name":"f","arguments":{"a":[1,{"b":"}"}]}}</tool_call>' >"$CORPUS/tool_calls/hermes"
printf '\003[TOOL_CALLS][{"name": "f", "arguments": {"x": null}, "id": "abc123XYZ"}]' >"$CORPUS/tool_calls/mistral"
printf '\004ok [TOOL_CALLS]f[ARGS]{"x": 1}[TOOL_CALLS]get_time[ARGS]{}' >"$CORPUS/tool_calls/mistral_args"
# request grammars: GBNF texts and JSON schemas
mkdir -p "$CORPUS/gbnf" "$CORPUS/json_schema"
printf 'root ::= ("yes" | "no") ", " word{1,3} "."\nword ::= [a-z]{1,5} " "? # c\n' >"$CORPUS/gbnf/words"
printf 'root ::= obj\nobj ::= "{" ( str ":" val ("," str ":" val)* )? "}"\nval ::= obj | str | [0-9]+\nstr ::= "\\"" [^"\\\\]* "\\""\n' >"$CORPUS/gbnf/json"
printf 'root ::= [\\u00e0-\\u00ff\\U0001F600]{2,} . [^\\n]? "\\x41"\n' >"$CORPUS/gbnf/classes"
printf '{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"enum":[1,"x",null]},"c":{"type":"array","items":{"$ref":"#/$defs/d"},"minItems":1,"maxItems":2}},"required":["a"],"additionalProperties":{"type":"integer"},"$defs":{"d":{"anyOf":[{"type":"boolean"},{"format":"date-time"}]}}}' >"$CORPUS/json_schema/object"
printf '{"type":["string","null"],"minLength":1,"format":"uuid"}' >"$CORPUS/json_schema/types"
printf '{"type":"array","prefixItems":[{"const":{"k":[1]}},{"type":"number"}],"items":false}' >"$CORPUS/json_schema/tuple"
run() { # target corpus-subdir max_len
    local t=$1 dir="$CORPUS/$2" max=$3 art="$BUILD/fuzz-artifacts/$1/" dict="$HERE/$2.dict"
    mkdir -p "$art"
    echo "== $t: ${SECS}s, max_len $max"
    if ! "$FUZZ/$t" "$dir" -max_total_time="$SECS" -max_len="$max" -rss_limit_mb=2048 -timeout=10 \
        -dict="$dict" -artifact_prefix="$art" -print_final_stats=1 >"$BUILD/fuzz-$t.log" 2>&1; then
        # on stdout as well as stderr: a CI log that keeps one stream's tail still shows what failed
        { echo "!! $t FAILED, see $BUILD/fuzz-$t.log and $art"
          grep -v -E "^#[0-9]+" "$BUILD/fuzz-$t.log" | tail -n 60
          for f in "$art"*; do [ -f "$f" ] && { echo "-- input $f ($(wc -c <"$f") bytes), first 1 KiB:"; head -c 1024 "$f" | od -A d -t x1 | head -n 70; }; done
        } | tee /dev/stderr
        failed="$failed $t"
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
run fuzz_sd3 sd3 65536
run fuzz_tokenizer_json tokenizer_json 16384
run fuzz_chat_template chat_template 16384
run fuzz_tool_calls tool_calls 8192
run fuzz_gbnf gbnf 8192
run fuzz_json_schema json_schema 8192
if [ -x "$FUZZ/fuzz_sd_request" ]; then run fuzz_sd_request sd_request 16384; fi
if [ -x "$FUZZ/fuzz_worker_request" ]; then run fuzz_worker_request worker_request 8192; fi
if [ $status -ne 0 ]; then echo "fuzz smoke: failed:$failed"; else echo "fuzz smoke: every target ran ${SECS}s clean"; fi
exit $status
