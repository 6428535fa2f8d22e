#!/usr/bin/env bash
# sd-worker-rbee driven by curl, as a person at a shell would: public
# /health, bearer auth on everything else, an rbee job streamed with
# `curl -N` (one progress line per step, an image, the end, [DONE]),
# AUTOMATIC1111's txt2img, OpenAI's generations (JSON) and edits
# (multipart files made with -F), a file that is no image refused by name,
# /metrics counting the images, and a clean exit on SIGTERM.
# usage: test_sd_curl.sh SD_WORKER_BINARY FIXTURES_DIR
set -u
BIN=$1
FIX=$2/diffusers
MODEL=$FIX/pipelines/sd15
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
TOKEN=curl-secret
AUTH=(-H "Authorization: Bearer $TOKEN")

RBEE_API_TOKEN=$TOKEN "$BIN" --model "$MODEL" --bind 127.0.0.1 --port 0 --port-file "$TMP/port" 2>"$TMP/log" &
PID=$!
for _ in $(seq 1 400); do
    [ -s "$TMP/port" ] && curl -sf "${AUTH[@]}" "http://127.0.0.1:$(cat "$TMP/port")/v1/ready" >/dev/null && break
    sleep 0.05
done
URL=http://127.0.0.1:$(cat "$TMP/port")
curl -sf "$URL/v1/ready" "${AUTH[@]}" >/dev/null || { cat "$TMP/log"; echo "FAIL: the worker never became ready"; exit 1; }

code=$(curl -s -o "$TMP/h" -w '%{http_code}' "$URL/health")
[ "$code" = 200 ] && grep -q '"status":"ok"' "$TMP/h" && ok "/health is public" || fail "/health: $code $(cat "$TMP/h")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/v1/jobs" -d '{"prompt":"x"}')
[ "$code" = 401 ] && ok "no token: 401" || fail "no token: $code"

# a job and its stream
curl -s "${AUTH[@]}" "$URL/v1/jobs" -d '{"prompt":"a teapot","width":64,"height":64,"steps":5,"seed":3}' >"$TMP/job"
ID=$(sed -n 's/.*"job_id":"\([^"]*\)".*/\1/p' "$TMP/job")
[ -n "$ID" ] || fail "job: $(cat "$TMP/job")"
curl -sN "${AUTH[@]}" "$URL/v1/jobs/$ID/stream" >"$TMP/stream"
steps=$(grep -c '^data: {"type":"progress"' "$TMP/stream")
images=$(grep -c '^data: {"type":"image","index":0,"seed":3,"png":"iVBORw0KGgo' "$TMP/stream")
last=$(grep '^data: ' "$TMP/stream" | tail -1)
ends=$(grep -c '^data: {"type":"end","images":1,"seed":3,"stop_reason":"completed"' "$TMP/stream")
[ "$steps" = 5 ] && [ "$images" = 1 ] && [ "$ends" = 1 ] && [ "$last" = "data: [DONE]" ] &&
    ok "curl -N stream: 5 progress events, 1 image, end, [DONE]" || fail "stream: $(cut -c1-120 "$TMP/stream")"
code=$(curl -s -o "$TMP/del" -w '%{http_code}' -X DELETE "${AUTH[@]}" "$URL/v1/jobs/job-nope")
[ "$code" = 404 ] && grep -q JOB_NOT_FOUND "$TMP/del" && ok "DELETE of an unknown job: 404" || fail "delete: $code"

# AUTOMATIC1111
curl -s "${AUTH[@]}" "$URL/sdapi/v1/txt2img" -H 'Content-Type: application/json' \
    -d '{"prompt":"a teapot","width":64,"height":64,"steps":3,"seed":3,"sampler_name":"Euler a"}' >"$TMP/a"
grep -q '"images":\["iVBORw0KGgo' "$TMP/a" && grep -q '\\"sampler_name\\":\\"Euler a\\"' "$TMP/a" &&
    ok "A1111 txt2img" || fail "A1111 txt2img: $(cut -c1-200 "$TMP/a")"

# OpenAI: generations and a multipart edit with a mask whose alpha marks the area
curl -s "${AUTH[@]}" "$URL/v1/images/generations" -H 'Content-Type: application/json' \
    -d '{"prompt":"a teapot","size":"64x64","n":2,"response_format":"b64_json","steps":2}' >"$TMP/g"
n=$(grep -o '"b64_json":"iVBORw0KGgo' "$TMP/g" | wc -l)
[ "$n" = 2 ] && ok "OpenAI generations: 2 images" || fail "generations: $(cut -c1-200 "$TMP/g")"
python3 - "$TMP/mask.png" <<'PY'
import struct, sys, zlib
w = h = 64
raw = b''.join(b'\0' + b''.join(b'\0\0\0' + (b'\0' if 16 <= x < 48 and 16 <= y < 48 else b'\xff') for x in range(w)) for y in range(h))
def chunk(t, b): return struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b))
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 6, 0, 0, 0)) +
                              chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY
curl -s "${AUTH[@]}" "$URL/v1/images/edits" -F image=@"$FIX/refs/sd15/init_image.png" -F mask=@"$TMP/mask.png" \
    -F prompt="a cup" -F steps=3 -F seed=4 >"$TMP/e"
grep -q '"b64_json":"iVBORw0KGgo' "$TMP/e" && ok "OpenAI edits (multipart, alpha mask)" || fail "edits: $(cut -c1-200 "$TMP/e")"
echo "not an image" >"$TMP/text.png"
curl -s "${AUTH[@]}" "$URL/v1/images/edits" -F image=@"$TMP/text.png" -F prompt="x" >"$TMP/bad"
grep -q '"param":"image"' "$TMP/bad" && grep -q 'not a PNG or JPEG' "$TMP/bad" && ok "a text file as image: 400 naming image" ||
    fail "bad image: $(cat "$TMP/bad")"
code=$(curl -s -o "$TMP/ct" -w '%{http_code}' "${AUTH[@]}" "$URL/v1/images/edits" -H 'Content-Type: application/json' -d '{}')
[ "$code" = 400 ] && grep -q multipart "$TMP/ct" && ok "edits without multipart: 400" || fail "edits json: $code"

curl -s "${AUTH[@]}" "$URL/metrics" >"$TMP/m"
imgs=$(sed -n 's/^llorch_sd_images_total \([0-9]*\)$/\1/p' "$TMP/m")
[ "$imgs" = 5 ] && ok "metrics: 5 images" || fail "metrics images: '$imgs'"

kill -TERM "$PID"
wait "$PID"
rc=$?
PID=
[ "$rc" = 0 ] && ok "SIGTERM: exit 0" || fail "exit status $rc"
[ "$fails" = 0 ] || { echo "$fails failures"; tail -20 "$TMP/log"; exit 1; }
echo "all passed"
