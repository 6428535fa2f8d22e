#!/usr/bin/env bash
# sd-worker-rbee serving the tiny SD3 pipeline (tests/data/sd3/pipelines/sd3)
# with --sd-version 3-medium: /v1/info reports architecture sd3, the SD3
# defaults (28 steps, sampler flow_euler) and no latent-RGB previews (16
# channels: only a TAESD could draw them); an
# rbee job streams its steps and a PNG; AUTOMATIC1111's txt2img answers with
# an image; --no-t5 loads too; a wrong --sd-version (xl) is refused at load.
# usage: test_sd3_worker.sh SD_WORKER_BINARY SOURCE_DIR
set -u
BIN=$1
MODEL=$2/tests/data/sd3/pipelines/sd3
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

start() { # start ARGS...: a worker on a free port; URL set
    rm -f "$TMP/port"
    "$BIN" --model "$MODEL" --local-mode --bind 127.0.0.1 --port 0 --port-file "$TMP/port" "$@" 2>"$TMP/log" &
    PID=$!
    for _ in $(seq 1 400); do
        [ -s "$TMP/port" ] && curl -sf "http://127.0.0.1:$(cat "$TMP/port")/v1/ready" >/dev/null && break
        sleep 0.05
    done
    URL=http://127.0.0.1:$(cat "$TMP/port" 2>/dev/null)
    curl -sf "$URL/v1/ready" >/dev/null || { cat "$TMP/log"; echo "FAIL: the worker never became ready"; exit 1; }
}
stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=; }

start --sd-version 3-medium
curl -s "$URL/v1/info" >"$TMP/info"
grep -q '"architecture":"sd3"' "$TMP/info" && grep -q '"default_steps":28' "$TMP/info" &&
    grep -q '"default_sampler":"flow_euler"' "$TMP/info" && grep -q '"previews":"none"' "$TMP/info" &&
    ok "/v1/info: sd3, 28 steps, flow_euler, no latent-rgb previews" ||
    fail "/v1/info: $(cat "$TMP/info")"

curl -s "$URL/v1/jobs" -d '{"prompt":"a red apple","width":64,"height":64,"steps":3,"seed":5}' >"$TMP/job"
ID=$(sed -n 's/.*"job_id":"\([^"]*\)".*/\1/p' "$TMP/job")
[ -n "$ID" ] || fail "job: $(cat "$TMP/job")"
curl -sN "$URL/v1/jobs/$ID/stream" >"$TMP/stream"
steps=$(grep -c '^data: {"type":"progress"' "$TMP/stream")
images=$(grep -c '^data: {"type":"image","index":0,"seed":5,"png":"iVBORw0KGgo' "$TMP/stream")
[ "$steps" = 3 ] && [ "$images" = 1 ] && ok "job stream: 3 progress events and a PNG" ||
    fail "stream: $(cut -c1-160 "$TMP/stream")"

curl -s "$URL/sdapi/v1/txt2img" -H 'Content-Type: application/json' \
    -d '{"prompt":"a red apple","width":64,"height":64,"steps":2,"seed":3,"sampler_name":"Euler"}' >"$TMP/a"
grep -q '"images":\["iVBORw0KGgo' "$TMP/a" && grep -q '\\"sampler_name\\":\\"Euler\\"' "$TMP/a" &&
    ok "A1111 txt2img with Euler" || fail "A1111 txt2img: $(cut -c1-300 "$TMP/a")"
stop

start --no-t5
curl -s "$URL/v1/info" | grep -q '"architecture":"sd3"' && ok "--no-t5 loads" || fail "--no-t5"
stop

"$BIN" --model "$MODEL" --local-mode --sd-version xl --bind 127.0.0.1 --port 0 --port-file "$TMP/port2" 2>"$TMP/log" &
PID=$!
for _ in $(seq 1 200); do kill -0 "$PID" 2>/dev/null || break; grep -q "expects a sdxl model" "$TMP/log" && break; sleep 0.05; done
grep -q "expects a sdxl model" "$TMP/log" && ok "--sd-version xl refused for an SD3 model" || fail "xl: $(tail -3 "$TMP/log")"
stop

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
