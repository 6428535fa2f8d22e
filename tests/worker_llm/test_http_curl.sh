#!/usr/bin/env bash
# Integration test of llm-worker-rbee with curl: starts the real binary on
# 127.0.0.1 (OS-chosen ports) with the bundled default model and checks the
# documented answers: startup refusals, auth (401 shapes), health/ready/info,
# rbee jobs + SSE stream + DELETE, bad input (malformed JSON, wrong types,
# huge bodies, invalid UTF-8, unknown routes, wrong methods), a full queue
# (503 + Retry-After), a client disconnecting mid-stream, a slow client,
# job reaping, JSON logs, and a graceful SIGTERM drain. Every worker started
# here is killed on exit.
# usage: test_http_curl.sh path/to/llm-worker-rbee
set -uo pipefail
BIN=$1
TMP=$(mktemp -d)
PIDS=()
FAILS=0
PASSES=0
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

ok() { PASSES=$((PASSES + 1)); echo "ok - $1"; }
bad() { FAILS=$((FAILS + 1)); echo "FAIL - $1"; }
check() { # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
source "$(dirname "${BASH_SOURCE[0]}")/../common/jget.sh"

# start_worker NAME [args...]: starts a worker, waits for ready; sets PORT and WPID.
start_worker() {
  local name=$1; shift
  rm -f "$TMP/$name.port"
  "$BIN" --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
  WPID=$!
  PIDS+=("$WPID")
  for _ in $(seq 1 600); do
    if [[ -s "$TMP/$name.port" ]]; then break; fi
    if ! kill -0 "$WPID" 2>/dev/null; then echo "worker $name died:"; cat "$TMP/$name.log"; return 1; fi
    sleep 0.05
  done
  PORT=$(cat "$TMP/$name.port")
  for _ in $(seq 1 600); do
    if curl -s "${AUTH[@]}" "http://127.0.0.1:$PORT/v1/ready" | grep -q '"ready":true'; then return 0; fi
    sleep 0.05
  done
  echo "worker $name never became ready"; cat "$TMP/$name.log"; return 1
}

# ---- startup refusals ----
out=$(env -u LLORCH_API_TOKEN "$BIN" --port 0 2>&1); rc=$?
check "refuses to start without token or --local-mode" test $rc -eq 2 -a -n "$(echo "$out" | grep 'LLORCH_API_TOKEN')"
ln -sf "$(readlink -f "$BIN")" "$TMP/llm-worker-rbee-cuda"
out=$(RBEE_BACKEND_PATH=$TMP "$TMP/llm-worker-rbee-cuda" --local-mode 2>&1); rc=$?
check "-cuda alias without the CUDA module exits with one clear line" test $rc -eq 2 -a "$(echo "$out" | wc -l)" -eq 1 \
  -a -n "$(echo "$out" | grep 'the CUDA backend is not installed: no librbee-cuda.so in .*; llm-worker-rbee-cpu runs on the CPU')"
out=$("$BIN" --parallel 0 2>&1); rc=$?
check "bad flag value is a usage error" test $rc -eq 2

# ---- main worker with a token ----
export LLORCH_API_TOKEN="s3cret-token-$RANDOM"
AUTH=(-H "Authorization: Bearer $LLORCH_API_TOKEN")
start_worker main --bind 127.0.0.1 --parallel 4 --queue-depth 16 --max-body-bytes 65536 --http-timeout 2 \
  --job-ttl-ms 600000 || exit 1
MAIN_PID=$WPID
U="http://127.0.0.1:$PORT"

code=$(curl -s -o "$TMP/h" -w '%{http_code}' "$U/health")
check "/health is public" test "$code" = 200 -a "$(jget status <"$TMP/h")" = ok
code=$(curl -s -o "$TMP/r" -w '%{http_code}' "$U/v1/ready")
check "no token: 401 MISSING_API_KEY" test "$code" = 401 -a "$(jget error.code <"$TMP/r")" = MISSING_API_KEY
code=$(curl -s -o "$TMP/r" -w '%{http_code}' -H "Authorization: Bearer nope" "$U/v1/ready")
check "wrong token: 401 INVALID_API_KEY" test "$code" = 401 -a "$(jget error.code <"$TMP/r")" = INVALID_API_KEY
code=$(curl -s -o "$TMP/r" -w '%{http_code}' -H "Authorization: Bearer ${LLORCH_API_TOKEN}x" "$U/v1/models")
check "token with an extra char: 401" test "$code" = 401 -a "$(jget error.code <"$TMP/r")" = INVALID_API_KEY
code=$(curl -s -o "$TMP/r" -w '%{http_code}' -H "Authorization: Basic $LLORCH_API_TOKEN" "$U/v1/completions" -d '{}')
check "wrong scheme: 401 INVALID_API_KEY" test "$code" = 401 -a "$(jget error.code <"$TMP/r")" = INVALID_API_KEY

r=$(curl -s "${AUTH[@]}" "$U/v1/ready")
check "/v1/ready: ready idle, model loaded" test "$(echo "$r" | jget ready)" = true -a "$(echo "$r" | jget state)" = idle -a "$(echo "$r" | jget model_loaded)" = true
r=$(curl -s "${AUTH[@]}" "$U/v1/info")
check "/v1/info: architecture, context, backend, memory" test "$(echo "$r" | jget architecture)" = llama -a \
  "$(echo "$r" | jget context_size)" = 512 -a "$(echo "$r" | jget device)" = cpu:0 -a \
  "$(echo "$r" | jget memory.model_bytes)" -gt 1000000 -a "$(echo "$r" | jget memory.process_rss_bytes)" -gt 1000000
r=$(curl -s "${AUTH[@]}" "$U/v1/models")
check "/v1/models lists the model" test "$(echo "$r" | jget data.0.id)" = rbee-default -a "$(echo "$r" | jget object)" = list

# ---- rbee job + stream, compared with the OpenAI completion of the same greedy request ----
BODY='{"operation":"infer","hive_id":"hive-1","model":"rbee-default","prompt":"And God said","max_tokens":12,"temperature":0,"top_p":1,"top_k":0,"seed":7}'
r=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d "$BODY")
JOB=$(echo "$r" | jget job_id)
check "POST /v1/jobs answers job_id and sse_url" test "$(echo "$r" | jget sse_url)" = "/v1/jobs/$JOB/stream"
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s1"
python3 - "$TMP/s1" >"$TMP/s1.check" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l]
assert all(l.startswith("data: ") for l in lines), lines
assert lines[-1] == "data: [DONE]", lines[-1]
ev = [json.loads(l[6:]) for l in lines[:-1]]
assert ev[0]["type"] == "started", ev[0]
toks = ev[1:-1]
assert all(e["type"] == "token" for e in toks)
assert [e["i"] for e in toks] == list(range(len(toks)))
end = ev[-1]
assert end["type"] == "end" and end["stop_reason"] == "MAX_TOKENS" and end["tokens_out"] == 12, end
assert end["decode_time_ms"] >= 0
print("".join(e["t"] for e in toks))
PY
rc=$?
[[ $rc -eq 0 ]] || { echo "# stream was:"; head -c 1500 "$TMP/s1"; }
check "SSE stream: started, tokens with i=0.., end MAX_TOKENS, [DONE]" test $rc -eq 0
r=$(curl -s "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"And God said","max_tokens":12,"temperature":0}')
check "stream text equals the non-streamed completion of the same greedy request" \
  test "$(echo "$r" | jget choices.0.text)" = "$(cat "$TMP/s1.check")" -a -n "$(cat "$TMP/s1.check")"
check "completion usage and finish_reason" test "$(echo "$r" | jget usage.completion_tokens)" = 12 -a \
  "$(echo "$r" | jget choices.0.finish_reason)" = length -a "$(echo "$r" | jget usage.prompt_tokens)" = 4
r=$(curl -s "${AUTH[@]}" "$U/v1/inference" -d '{"prompt":"In the beginning","max_tokens":3,"temperature":0.5,"stop":["xyz"],"repetition_penalty":1.1,"min_p":0.05}')
check "POST /v1/inference (untagged form)" test -n "$(echo "$r" | jget job_id | grep '^job-')"

# ---- bad input ----
expect400() { # name body field constraint-prefix [route]
  local route=${5:-/v1/jobs}
  local code
  code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' "$U$route" --data-binary "$2")
  local f c
  f=$(jget errors.0.field <"$TMP/b" 2>/dev/null); c=$(jget errors.0.constraint <"$TMP/b" 2>/dev/null)
  if [[ $code == 400 && $f == "$3" && $c == "$4"* ]]; then ok "$1"; else bad "$1 (got $code $(head -c 300 "$TMP/b"))"; fi
}
expect400 "malformed JSON" '{"prompt": "x", ' body json
expect400 "top level not an object" '["prompt"]' body json_object
expect400 "prompt of the wrong type" '{"prompt": 12, "max_tokens": 3}' prompt type:string
expect400 "max_tokens of the wrong type" '{"prompt": "x", "max_tokens": "3"}' max_tokens type:integer
expect400 "max_tokens 0" '{"prompt": "x", "max_tokens": 0}' max_tokens range
expect400 "max_tokens beyond the context" '{"prompt": "x", "max_tokens": 600}' max_tokens range
expect400 "temperature out of range" '{"prompt": "x", "temperature": 2.5}' temperature range:0..2
expect400 "top_p out of range" '{"prompt": "x", "top_p": 1.5}' top_p range:0..1
expect400 "seventeen stop strings" '{"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}' stop max_items:16
expect400 "logprobs on the rbee job API" '{"prompt": "x", "logprobs": true}' logprobs unsupported_parameter
expect400 "n 2 on the rbee job API" '{"prompt": "x", "n": 2}' n range:1..1
expect400 "logit_bias key not a token id" '{"prompt": "x", "logit_bias": {"the": 5}}' logit_bias key:token_id
LONG=$(printf 'y%.0s' $(seq 1 101))
expect400 "stop string over 100 bytes" "{\"prompt\": \"x\", \"stop\": [\"$LONG\"]}" stop length
expect400 "invalid UTF-8" $'{"prompt": "\xc3\x28 bad"}' body utf8
BIGP=$(head -c 600 /dev/zero | tr '\0' 'a')
PROMPT_LONG=$(for i in $(seq 1 120); do printf 'And God said unto Moses '; done)
expect400 "prompt longer than the context" "{\"prompt\": \"$PROMPT_LONG\", \"max_tokens\": 1}" prompt context
head -c 200000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt":"/; s/$/"}/' >"$TMP/huge.json"
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/jobs" --data-binary @"$TMP/huge.json")
check "huge body: 413 max_bytes" test "$code" = 413 -a "$(jget errors.0.constraint <"$TMP/b")" = max_bytes
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" -H 'Transfer-Encoding: chunked' "$U/v1/jobs" --data-binary @"$TMP/huge.json")
check "huge chunked body: 413 max_bytes" test "$code" = 413 -a "$(jget errors.0.constraint <"$TMP/b")" = max_bytes
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"x","temperature":-1}')
check "OpenAI error shape on /v1/completions" test "$code" = 400 -a "$(jget error.type <"$TMP/b")" = invalid_request_error -a "$(jget error.param <"$TMP/b")" = temperature
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/chat/completions" -d '{"messages":[]}')
check "chat with no messages: 400" test "$code" = 400 -a "$(jget error.param <"$TMP/b")" = messages
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v2/whatever")
check "unknown route: 404" test "$code" = 404 -a "$(jget error.code <"$TMP/b")" = NOT_FOUND
code=$(curl -s -o "$TMP/b" -D "$TMP/hd" -w '%{http_code}' "${AUTH[@]}" -X PUT "$U/v1/jobs" -d '{}')
check "wrong method: 405 with Allow" test "$code" = 405 -a -n "$(grep -i '^Allow: POST' "$TMP/hd")"
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" -X DELETE "$U/v1/jobs/job-doesnotexist")
check "DELETE of an unknown job: 404" test "$code" = 404
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/jobs/job-nope/stream")
check "stream of an unknown job: 404" test "$code" = 404

# ---- DELETE cancels a running job quickly ----
# two companion jobs share the batch, so the job under test decodes at a
# fraction of its solo speed (the bundled model alone streams ~2000 tokens/s,
# and an idle machine had generated 293 of 450 tokens by the time the DELETE
# request arrived) and is surely mid-generation when cancelled
CJOBS=()
CPIDS=()
for seed in 5 6; do
  CJ=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d "{\"prompt\":\"In the beginning\",\"max_tokens\":450,\"temperature\":0.7,\"seed\":$seed}" | jget job_id)
  CJOBS+=("$CJ")
  curl -sN "${AUTH[@]}" "$U/v1/jobs/$CJ/stream" >/dev/null &
  CPIDS+=($!)
done
JOB=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"prompt":"And the LORD spake","max_tokens":450,"temperature":0.7,"seed":3}' | jget job_id)
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s2" &
CURLPID=$!
for _ in $(seq 1 200); do grep -q '"type":"token"' "$TMP/s2" && break; sleep 0.02; done
t0=$(date +%s%N)
curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$JOB" >"$TMP/d"
n1=$(grep -c '"type":"token"' "$TMP/s2")
for _ in $(seq 1 500); do grep -q 'DONE' "$TMP/s2" && break; sleep 0.005; done
t1=$(date +%s%N)
wait $CURLPID
ms=$(( (t1 - t0) / 1000000 ))
ntok=$(grep -c '"type":"token"' "$TMP/s2")
echo "# DELETE -> end of stream: ${ms} ms, ${ntok} of 450 tokens streamed, ${n1} of them when the DELETE returned"
check "DELETE: stream ends with stop_reason CANCELLED" test -n "$(grep '"stop_reason":"CANCELLED"' "$TMP/s2")" -a "$(jget cancelled <"$TMP/d")" = true
# promptness in work, not wall time (a loaded or sanitized machine slows both
# sides alike): generation stopped before max_tokens, and within a few
# batches of the cancel (tokens already on their way to the client included)
check "DELETE: generation stopped before max_tokens, within 100 tokens of the cancel" \
  test "$ntok" -lt 450 -a $((ntok - n1)) -lt 100
for CJ in "${CJOBS[@]}"; do curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$CJ" >/dev/null; done
wait "${CPIDS[@]}"

# ---- client disconnect mid-stream cancels the job ----
before=$(curl -s "${AUTH[@]}" "$U/metrics" | awk '/^llorch_jobs_cancelled_total/ {print $2}')
JOB=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"prompt":"And the LORD spake","max_tokens":450,"temperature":0.7,"seed":4}' | jget job_id)
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s3" &
CURLPID=$!
for _ in $(seq 1 200); do grep -q '"type":"token"' "$TMP/s3" && break; sleep 0.02; done
kill -9 $CURLPID; wait $CURLPID 2>/dev/null
state=""
for _ in $(seq 1 100); do
  r=$(curl -s "${AUTH[@]}" "$U/v1/jobs/$JOB"); state=$(echo "$r" | jget stop_reason)
  [[ $state == CANCELLED ]] && break; sleep 0.02
done
after=$(curl -s "${AUTH[@]}" "$U/metrics" | awk '/^llorch_jobs_cancelled_total/ {print $2}')
check "client disconnect mid-stream cancels the job" test "$state" = CANCELLED -a "$after" -gt "$before"
check "the disconnected job produced far fewer than max_tokens" test "$(echo "$r" | jget tokens_out)" -lt 450
# and the same for an OpenAI stream
curl -sN "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"And","max_tokens":450,"temperature":0.7,"stream":true}' >"$TMP/s4" &
CURLPID=$!
for _ in $(seq 1 200); do grep -q 'text_completion' "$TMP/s4" && break; sleep 0.02; done
kill -9 $CURLPID; wait $CURLPID 2>/dev/null
for _ in $(seq 1 100); do
  a=$(curl -s "${AUTH[@]}" "$U/metrics" | awk '/^llorch_active_sequences/ {print $2}'); [[ $a == 0 ]] && break; sleep 0.02
done
check "OpenAI stream disconnect frees the sequence" test "$a" = 0

# ---- slow client: a half-sent request is dropped after --http-timeout, others are served meanwhile ----
exec 7<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro' >&7
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/health")
check "other clients are served while a slow client stalls" test "$code" = 200
t0=$(date +%s)
timeout 10 cat <&7 >"$TMP/slow" 2>/dev/null
t1=$(date +%s)
exec 7>&-
check "the stalled connection is closed by the server timeout" test $((t1 - t0)) -le 8

# ---- metrics ----
curl -s "${AUTH[@]}" "$U/metrics" >"$TMP/m"
check "metrics: requests by route and status" test -n "$(grep '^llorch_requests_total{route="/v1/jobs",status="400"}' "$TMP/m")"
check "metrics: tokens and rates" test -n "$(grep '^llorch_tokens_out_total [1-9]' "$TMP/m")" -a -n "$(grep '^llorch_decode_tokens_per_second [1-9]' "$TMP/m")"
check "metrics: 401s counted" test -n "$(grep 'status="401"' "$TMP/m")"

# ---- OpenAI fields that ask for unimplemented behaviour are refused, never ignored ----
refused() { # refused NAME ROUTE BODY FIELD
  local code
  code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U$2" -d "$3")
  if [[ $code == 400 && $(jget error.param <"$TMP/b") == "$4" && $(jget error.code <"$TMP/b") == unsupported_parameter && \
        $(jget error.type <"$TMP/b") == invalid_request_error ]]; then ok "refused: $1"; else bad "refused: $1 (got $code $(head -c 300 "$TMP/b"))"; fi
}
M='"messages":[{"role":"user","content":"hi"}],"max_tokens":2'
# the bundled model's plain template shows no tool-call syntax: tools are refused
refused "chat tools" /v1/chat/completions "{$M,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]}" tools
refused "chat functions" /v1/chat/completions "{$M,\"functions\":[{\"name\":\"f\"}]}" functions
refused "completions tools" /v1/completions "{\"prompt\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}" tools
invalid() { # invalid NAME ROUTE BODY FIELD: a 400 naming FIELD
  local code
  code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U$2" -d "$3")
  if [[ $code == 400 && $(jget error.param <"$TMP/b") == "$4" ]]; then ok "invalid: $1"; else bad "invalid: $1 (got $code $(head -c 300 "$TMP/b"))"; fi
}
invalid "chat tool_choice required without tools" /v1/chat/completions "{$M,\"tool_choice\":\"required\"}" tool_choice
invalid "chat function_call of a function not given" /v1/chat/completions "{$M,\"function_call\":{\"name\":\"f\"}}" function_call
refused "chat json_schema with a pattern" /v1/chat/completions "{$M,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}" response_format.json_schema.schema
refused "chat audio" /v1/chat/completions "{$M,\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}" audio
refused "chat modalities with audio" /v1/chat/completions "{$M,\"modalities\":[\"text\",\"audio\"]}" modalities
refused "chat prediction" /v1/chat/completions "{$M,\"prediction\":{\"type\":\"content\",\"content\":\"x\"}}" prediction
refused "chat web_search_options" /v1/chat/completions "{$M,\"web_search_options\":{}}" web_search_options
refused "chat reasoning_effort" /v1/chat/completions "{$M,\"reasoning_effort\":\"low\"}" reasoning_effort
refused "chat store:true" /v1/chat/completions "{$M,\"store\":true}" store
refused "completions echo" /v1/completions '{"prompt":"And","max_tokens":2,"echo":true}' echo
refused "completions suffix" /v1/completions '{"prompt":"And","max_tokens":2,"suffix":"amen"}' suffix
refused "completions best_of" /v1/completions '{"prompt":"And","max_tokens":2,"best_of":3}' best_of
# ---- implemented fields with bad values: 400 naming the field ----
invalid() { # invalid NAME ROUTE BODY FIELD
  local code
  code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U$2" -d "$3")
  if [[ $code == 400 && $(jget error.param <"$TMP/b") == "$4" && $(jget error.type <"$TMP/b") == invalid_request_error ]]
  then ok "invalid: $1"; else bad "invalid: $1 (got $code $(head -c 300 "$TMP/b"))"; fi
}
invalid "chat top_logprobs 21" /v1/chat/completions "{$M,\"logprobs\":true,\"top_logprobs\":21}" top_logprobs
invalid "chat top_logprobs without logprobs" /v1/chat/completions "{$M,\"top_logprobs\":3}" top_logprobs
invalid "chat logprobs not a boolean" /v1/chat/completions "{$M,\"logprobs\":3}" logprobs
invalid "completions logprobs 21" /v1/completions '{"prompt":"And","max_tokens":2,"logprobs":21}' logprobs
invalid "completions top_logprobs" /v1/completions '{"prompt":"And","max_tokens":2,"logprobs":1,"top_logprobs":1}' top_logprobs
invalid "chat logit_bias key not an integer" /v1/chat/completions "{$M,\"logit_bias\":{\"x1\":-100}}" logit_bias
invalid "chat logit_bias value 101" /v1/chat/completions "{$M,\"logit_bias\":{\"50\":101}}" logit_bias
invalid "chat logit_bias id outside the vocabulary" /v1/chat/completions "{$M,\"logit_bias\":{\"4096\":1}}" logit_bias
invalid "chat n 0" /v1/chat/completions "{$M,\"n\":0}" n
invalid "chat n beyond the slots" /v1/chat/completions "{$M,\"n\":17}" n
invalid "completions 17 stop strings" /v1/completions '{"prompt":"And","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}' stop
invalid "chat max_completion_tokens beyond the context" /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"max_completion_tokens\":100000}" max_completion_tokens
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/chat/completions" -d "{$M,\"logprobs\":false,\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},\"logit_bias\":{},\"n\":1,\"user\":\"u1\",\"metadata\":{\"a\":\"b\"},\"service_tier\":\"auto\",\"store\":false,\"parallel_tool_calls\":true,\"modalities\":[\"text\"]}")
check "fields that ask for nothing pass" test "$code" = 200 -a "$(jget object <"$TMP/b")" = chat.completion
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"And","max_tokens":2,"logprobs":null,"echo":false,"suffix":"","best_of":1}')
check "completions fields that ask for nothing pass" test "$code" = 200

# ---- latency histograms per route ----
curl -s "${AUTH[@]}" "$U/metrics" >"$TMP/m"
python3 - "$TMP/m" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
def val(prefix):
    v = [float(l.split()[-1]) for l in lines if l.startswith(prefix + " ")]
    return v[0] if v else -1
for name in ("time_to_first_token", "inter_token_latency", "request_duration"):
    assert f"# TYPE llorch_{name}_seconds histogram" in lines, name
c = val('llorch_time_to_first_token_seconds_count{route="/v1/completions"}')
assert c >= 3, c
assert val('llorch_time_to_first_token_seconds_bucket{route="/v1/completions",le="+Inf"}') == c
assert val('llorch_inter_token_latency_seconds_count{route="/v1/jobs"}') >= 11, "itl /v1/jobs"
assert val('llorch_time_to_first_token_seconds_count{route="/v1/chat/completions"}') >= 1
assert val('llorch_request_duration_seconds_count{route="/v1/completions"}') >= c
assert val('llorch_time_to_first_token_seconds_sum{route="/v1/completions"}') > 0
PY
check "TTFT, inter-token and request-duration histograms per route" test $? -eq 0
t0=$(awk '$1 == "llorch_time_to_first_token_seconds_count{route=\"/v1/completions\"}" {print $2}' "$TMP/m")
curl -s "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"And God said","max_tokens":3,"temperature":0}' >/dev/null
t1=$(curl -s "${AUTH[@]}" "$U/metrics" | awk '$1 == "llorch_time_to_first_token_seconds_count{route=\"/v1/completions\"}" {print $2}')
check "the TTFT histogram counts one more completion" test "$((t1 - t0))" = 1

# ---- SIGTERM: running stream completes, exit 0 ----
curl -sN "${AUTH[@]}" "$U/v1/completions" -d '{"prompt":"And God said","max_tokens":40,"temperature":0,"stream":true}' >"$TMP/s5" &
CURLPID=$!
for _ in $(seq 1 200); do grep -q 'text_completion' "$TMP/s5" && break; sleep 0.02; done
kill -TERM $MAIN_PID
wait $CURLPID
wait $MAIN_PID; rc=$?
check "SIGTERM: the running stream finished normally" test -n "$(grep '"finish_reason":"length"' "$TMP/s5")" -a -n "$(grep 'DONE' "$TMP/s5")"
check "SIGTERM: exit code 0" test $rc -eq 0
check "SIGTERM: drain logged" test -n "$(grep 'draining' "$TMP/main.log")"

# ---- small queue: 503 + Retry-After; JSON logs; --local-mode without a token ----
unset LLORCH_API_TOKEN
AUTH=()
LLORCH_LOG_FORMAT=json start_worker q --local-mode --parallel 1 --queue-depth 1 --job-ttl-ms 1000 || exit 1
U="http://127.0.0.1:$PORT"
codes=()
for i in 1 2 3; do
  codes+=("$(curl -s -o "$TMP/q$i" -D "$TMP/qh$i" -w '%{http_code}' "$U/v1/jobs" -d '{"prompt":"And God said","max_tokens":400,"temperature":0}')")
done
echo "# queue codes: ${codes[*]}"
check "full queue: third job gets 503" test "${codes[0]}" = 200 -a "${codes[1]}" = 200 -a "${codes[2]}" = 503
check "503 carries Retry-After and QUEUE_FULL" test -n "$(grep -i '^Retry-After: ' "$TMP/qh3")" -a "$(jget error.code <"$TMP/q3")" = QUEUE_FULL
for i in 1 2; do curl -s -X DELETE "$U/v1/jobs/$(jget job_id <"$TMP/q$i")" >/dev/null; done
# ---- finished jobs are reaped after the grace period (this worker's --job-ttl-ms 1000) ----
JOB=$(jget job_id <"$TMP/q1")
for _ in $(seq 1 100); do [[ $(curl -s "$U/v1/jobs/$JOB" | jget state) == done ]] && break; sleep 0.05; done
sleep 2.5
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/jobs/$JOB")
tracked=$(curl -s "$U/metrics" | awk '/^llorch_jobs_tracked/ {print $2}')
check "finished jobs are removed after --job-ttl-ms" test "$code" = 404 -a "$tracked" = 0
kill -INT $WPID; wait $WPID; rc=$?
check "SIGINT: exit code 0" test $rc -eq 0
python3 - "$TMP/q.log" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) >= 5
for l in lines:
    d = json.loads(l)
    assert {"timestamp", "level", "event", "message"} <= d.keys(), d
PY
check "LLORCH_LOG_FORMAT=json: every log line is a JSON object" test $? -eq 0

# ---- IPv6: the worker on ::1 ----
"$BIN" --local-mode --bind ::1 --port 0 --port-file "$TMP/v6.port" --parallel 1 >"$TMP/v6.log" 2>&1 &
WPID=$!
PIDS+=("$WPID")
for _ in $(seq 1 400); do [[ -s "$TMP/v6.port" ]] && break; sleep 0.05; done
U6="http://[::1]:$(cat "$TMP/v6.port")"
for _ in $(seq 1 400); do curl -s "$U6/v1/ready" | grep -q '"ready":true' && break; sleep 0.05; done
r=$(curl -s "$U6/v1/completions" -d '{"prompt":"And God said","max_tokens":12,"temperature":0}')
check "IPv6 (::1): the same greedy completion as over IPv4" test "$(echo "$r" | jget choices.0.text)" = "$(cat "$TMP/s1.check")"
kill -TERM $WPID; wait $WPID

echo "$PASSES passed, $FAILS failed"
[[ $FAILS -eq 0 ]]
