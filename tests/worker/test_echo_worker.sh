#!/usr/bin/env bash
# Integration test of the shared worker layer through echo-worker-rbee, a
# worker built on src/worker alone: readiness while a slow "model" loads,
# auth (public /health and page, token elsewhere), job streams (started,
# worker events in order, exactly one end, [DONE]), cancel by DELETE and by
# disconnect, the bounded queue, CORS (off by default, preflights, allowed
# and refused origins), IPv6 (::1 and dual-stack ::), TLS with a
# self-signed certificate made here and a client that verifies it, request
# histograms that move, environment-variable equivalents of flags, JSON
# logs naming the worker, heartbeats naming it to a fake hive, and a
# graceful SIGTERM. Every process started here is killed on exit.
# usage: test_echo_worker.sh path/to/echo-worker-rbee
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
AUTH=()
SCHEME=http
HOST=127.0.0.1
CURLX=()

# start_worker NAME [args...]: starts a worker and waits until it wrote its
# port (not until ready); sets PORT, WPID and U.
start_worker() {
  local name=$1; shift
  rm -f "$TMP/$name.port"
  "$BIN" --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
  WPID=$!
  PIDS+=("$WPID")
  for _ in $(seq 1 400); do
    if [[ -s "$TMP/$name.port" ]]; then break; fi
    if ! kill -0 "$WPID" 2>/dev/null; then echo "worker $name died:"; cat "$TMP/$name.log"; return 1; fi
    sleep 0.05
  done
  PORT=$(cat "$TMP/$name.port")
  U="$SCHEME://$HOST:$PORT"
}
wait_ready() {
  for _ in $(seq 1 400); do
    if curl -s "${CURLX[@]}" "${AUTH[@]}" "$U/v1/ready" | grep -q '"ready":true'; then return 0; fi
    sleep 0.05
  done
  echo "worker never became ready"; return 1
}
# sse FILE: checks started, echo events i=0..n-1, one end, [DONE]; prints "n stop_reason"
sse_check() {
  python3 - "$1" <<'PY'
import json, sys
body = open(sys.argv[1]).read()
blocks = body.split("\n\n")
assert blocks[-1] == "", "stream does not end with a blank line"
lines = blocks[:-1]
assert all(b.startswith("data: ") and "\n" not in b for b in lines), lines
assert lines[-1] == "data: [DONE]", lines[-1]
ev = [json.loads(b[6:]) for b in lines[:-1]]
assert ev[0]["type"] == "started" and ev[0]["job_id"], ev[0]
echo = ev[1:-1]
assert all(e["type"] == "echo" for e in echo), echo
assert [e["i"] for e in echo] == list(range(len(echo)))
assert ev[-1]["type"] == "end", ev[-1]
assert sum(1 for e in ev if e["type"] in ("end", "error")) == 1
print(len(echo), ev[-1]["stop_reason"])
PY
}

# ---- readiness while the model loads; auth; public page ----
export RBEE_API_TOKEN="tok-$RANDOM$RANDOM"
AUTH=(-H "Authorization: Bearer $RBEE_API_TOKEN")
start_worker slow --load-delay-ms 4000 --event-delay-ms 2 || exit 1
# three requests at once while loading (the checks run afterwards: a busy machine is slow to run them)
code1=$(curl -s -o "$TMP/r1" -D "$TMP/rh" -w '%{http_code}' "${AUTH[@]}" "$U/v1/ready")
code2=$(curl -s -o "$TMP/r2" -w '%{http_code}' "$U/health")
code3=$(curl -s -o "$TMP/r3" -w '%{http_code}' "${AUTH[@]}" "$U/v1/jobs" -d '{"n":2}')
check "/v1/ready during the load: 503 + Retry-After, JSON ready:false state:loading" \
  test "$code1" = 503 -a "$(jget ready <"$TMP/r1")" = false -a "$(jget state <"$TMP/r1")" = loading -a -n "$(grep -i '^Retry-After:' "$TMP/rh")"
check "/health during the load: 200, state loading, no token needed" test "$code2" = 200 -a "$(jget state <"$TMP/r2")" = loading
check "a job during the load: 503 MODEL_LOADING" test "$code3" = 503 -a "$(jget error.code <"$TMP/r3")" = MODEL_LOADING
wait_ready || exit 1
check "/v1/ready after the load: 200" test "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "$U/v1/ready")" = 200
code=$(curl -s -o "$TMP/page" -D "$TMP/ph" -w '%{http_code}' "$U/")
check "the worker's page is public" test "$code" = 200 -a -n "$(grep 'echo-worker-rbee' "$TMP/page")" -a -n "$(grep -i '^Content-Type: text/html' "$TMP/ph")"
check "other routes need the token" test "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/info")" = 401 -a \
  "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/jobs" -d '{}')" = 401 -a "$(curl -s -o /dev/null -w '%{http_code}' "$U/metrics")" = 401
r=$(curl -s "${AUTH[@]}" "$U/v1/info")
check "/v1/info names the worker and adds its fields" test "$(echo "$r" | jget implementation)" = echo-worker-rbee -a \
  "$(echo "$r" | jget event_delay_ms)" = 2 -a "$(echo "$r" | jget state)" = idle
code=$(curl -s -o "$TMP/r" -D "$TMP/rh" -w '%{http_code}' "${AUTH[@]}" -X PUT "$U/v1/echo")
check "wrong method: 405 with Allow: POST" test "$code" = 405 -a -n "$(grep -i '^Allow: POST' "$TMP/rh")"
kill -TERM $WPID; wait $WPID

# ---- streams, cancel, queue, histograms, hive, JSON logs ----
cat >"$TMP/hive.py" <<'PY'
import http.server, json, sys
out = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        out.write(json.dumps({"path": self.path, "body": json.loads(self.rfile.read(n))}) + "\n"); out.flush()
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[2], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
python3 "$TMP/hive.py" "$TMP/hive.jsonl" "$TMP/hive.port" &
PIDS+=($!)
for _ in $(seq 1 100); do [[ -s "$TMP/hive.port" ]] && break; sleep 0.05; done
HP=$(cat "$TMP/hive.port")
RBEE_EVENT_DELAY_MS=3 start_worker main --queue-depth 1 --log-format json --hive-url "http://127.0.0.1:$HP" \
  --heartbeat-interval-ms 100 --worker-id w-echo || exit 1
MAIN_PID=$WPID
wait_ready || exit 1
r=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"n":5,"text":"hé"}')
JOB=$(echo "$r" | jget job_id)
check "POST /v1/jobs answers job_id and sse_url" test "$(echo "$r" | jget sse_url)" = "/v1/jobs/$JOB/stream"
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s1"
check "job stream: started, 5 echo events in order, one end DONE, [DONE]" test "$(sse_check "$TMP/s1")" = "5 DONE"
check "event payloads carry the request's text" test -n "$(grep -F '"text":"hé"' "$TMP/s1")"
r=$(curl -s "${AUTH[@]}" "$U/v1/jobs/$JOB")
check "GET /v1/jobs/{id}: done, the worker's fields, the final event" test "$(echo "$r" | jget state)" = done -a \
  "$(echo "$r" | jget n)" = 5 -a "$(echo "$r" | jget result.stop_reason)" = DONE
curl -sN "${AUTH[@]}" "$U/v1/echo" -d '{"n":3}' >"$TMP/s2"
check "a direct stream (POST /v1/echo)" test "$(sse_check "$TMP/s2")" = "3 DONE"
code=$(curl -s -o "$TMP/b" -w '%{http_code}' "${AUTH[@]}" "$U/v1/jobs" -d '{"n":"x"}')
check "bad field: 400 naming it" test "$code" = 400 -a "$(jget errors.0.field <"$TMP/b")" = n
# DELETE cancels between events
JOB=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"n":100000}' | jget job_id)
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s3" &
CP=$!
for _ in $(seq 1 200); do grep -q '"type":"echo"' "$TMP/s3" && break; sleep 0.02; done
r=$(curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$JOB")
wait $CP
out=$(sse_check "$TMP/s3")
check "DELETE: the stream ends CANCELLED, well-formed" test "${out#* }" = CANCELLED -a "$(echo "$r" | jget cancelled)" = true
r=$(curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$JOB")
check "DELETE of a finished job: already_finished" test "$(echo "$r" | jget status)" = already_finished
# a client that disconnects cancels its job
JOB=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"n":100000}' | jget job_id)
curl -sN "${AUTH[@]}" "$U/v1/jobs/$JOB/stream" >"$TMP/s4" &
CP=$!
for _ in $(seq 1 200); do grep -q '"type":"echo"' "$TMP/s4" && break; sleep 0.02; done
kill -9 $CP; wait $CP 2>/dev/null
st=""
for _ in $(seq 1 100); do
  st=$(curl -s "${AUTH[@]}" "$U/v1/jobs/$JOB" | jget result.stop_reason); [[ $st == CANCELLED ]] && break; sleep 0.02
done
check "client disconnect cancels the job" test "$st" = CANCELLED
# queue: one running, one waiting, the third refused
J1=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"n":100000}' | jget job_id)
for _ in $(seq 1 100); do [[ $(curl -s "${AUTH[@]}" "$U/v1/jobs/$J1" | jget state) == running ]] && break; sleep 0.02; done
J2=$(curl -s "${AUTH[@]}" "$U/v1/jobs" -d '{"n":1}' | jget job_id)
code=$(curl -s -o "$TMP/q" -D "$TMP/qh" -w '%{http_code}' "${AUTH[@]}" "$U/v1/jobs" -d '{"n":1}')
check "a full queue: 503 QUEUE_FULL + Retry-After" test "$code" = 503 -a "$(jget error.code <"$TMP/q")" = QUEUE_FULL -a -n "$(grep -i '^Retry-After:' "$TMP/qh")"
r=$(curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$J2")
check "a queued job can be cancelled" test "$(echo "$r" | jget cancelled)" = true
curl -s "${AUTH[@]}" -X DELETE "$U/v1/jobs/$J1" >/dev/null
r=$(curl -sN "${AUTH[@]}" "$U/v1/jobs/$J2/stream")
check "a job cancelled in the queue still streams started, then end CANCELLED" \
  test "$(echo "$r" | head -c 40 | grep -c started)" = 1 -a -n "$(echo "$r" | grep '"stop_reason":"CANCELLED"')"
# histograms move as requests are served
hcount() { curl -s "${AUTH[@]}" "$U/metrics" | awk -v k="llorch_request_duration_seconds_count{route=\"$1\"}" '$1 == k {print $2}'; }
c0=$(hcount /v1/echo)
for i in 1 2 3; do curl -sN "${AUTH[@]}" "$U/v1/echo" -d '{"n":2}' >/dev/null; done
c1=$(hcount /v1/echo)
check "request-duration histogram: count +3 after 3 requests" test "$((c1 - ${c0:-0}))" = 3
curl -s "${AUTH[@]}" "$U/metrics" >"$TMP/m"
python3 - "$TMP/m" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
b = [(float("inf") if m.group(1) == "+Inf" else float(m.group(1)), int(m.group(2))) for l in lines
     for m in [re.match(r'llorch_request_duration_seconds_bucket\{route="/v1/echo",le="([^"]+)"\} (\d+)$', l)] if m]
assert len(b) >= 5 and b[-1][0] == float("inf"), b
assert all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), b  # cumulative
count = [int(l.split()[-1]) for l in lines if l.startswith('llorch_request_duration_seconds_count{route="/v1/echo"}')][0]
total = [float(l.split()[-1]) for l in lines if l.startswith('llorch_request_duration_seconds_sum{route="/v1/echo"}')][0]
assert b[-1][1] == count and count >= 4 and total > 0.0, (count, total)
assert "# TYPE llorch_request_duration_seconds histogram" in lines
assert any(l.startswith("llorch_requests_total{route=\"/v1/echo\",status=\"200\"}") for l in lines)
PY
check "request-duration histogram: cumulative buckets, +Inf = count, sum > 0" test $? -eq 0
check "heartbeats name the worker and its id" test -n "$(grep '"implementation": "echo-worker-rbee"' "$TMP/hive.jsonl" | grep '"id": "w-echo"')"
# SIGTERM with a stream running: it finishes, exit 0, a final stopping heartbeat
curl -sN "${AUTH[@]}" "$U/v1/echo" -d '{"n":150}' >"$TMP/s5" &
CP=$!
for _ in $(seq 1 200); do grep -q '"type":"echo"' "$TMP/s5" && break; sleep 0.02; done
kill -TERM $MAIN_PID
wait $CP
wait $MAIN_PID; rc=$?
check "SIGTERM: the running stream completed, exit 0" test "$(sse_check "$TMP/s5")" = "150 DONE" -a $rc -eq 0
check "SIGTERM: a final stopping heartbeat" test "$(tail -n 1 "$TMP/hive.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["body"]["worker"]["status"])')" = stopping
python3 - "$TMP/main.log" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(lines) >= 4 and all(d["target"] == "echo-worker-rbee" and d["event"] for d in lines), lines[:3]
PY
check "--log-format json: every line is JSON naming the worker" test $? -eq 0

# ---- CORS ----
start_worker cors0 || exit 1
wait_ready || exit 1
curl -s -o /dev/null -D "$TMP/ch" -H 'Origin: https://app.example' "$U/health"
check "CORS is off by default: no Access-Control headers" test -z "$(grep -i '^Access-Control' "$TMP/ch")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS -H 'Origin: https://app.example' \
  -H 'Access-Control-Request-Method: POST' "$U/v1/jobs")
check "CORS off: a preflight is not answered as one" test "$code" = 401
kill -TERM $WPID; wait $WPID
start_worker cors --cors-origin 'https://app.example, https://other.example' || exit 1
wait_ready || exit 1
code=$(curl -s -o /dev/null -D "$TMP/ch" -w '%{http_code}' -X OPTIONS -H 'Origin: https://app.example' \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type' "$U/v1/jobs")
check "preflight: 204 without a token, origin echoed, methods and headers allowed" test "$code" = 204 -a \
  -n "$(grep -i '^Access-Control-Allow-Origin: https://app.example' "$TMP/ch")" -a \
  -n "$(grep -i '^Access-Control-Allow-Methods: POST' "$TMP/ch")" -a \
  -n "$(grep -i '^Access-Control-Allow-Headers: authorization, content-type' "$TMP/ch")" -a -n "$(grep -i '^Vary: Origin' "$TMP/ch")"
code=$(curl -s -o /dev/null -D "$TMP/ch" -w '%{http_code}' "${AUTH[@]}" -H 'Origin: https://other.example' "$U/v1/echo" -d '{"n":1}')
check "an allowed origin's request carries Access-Control-Allow-Origin" test "$code" = 200 -a \
  -n "$(grep -i '^Access-Control-Allow-Origin: https://other.example' "$TMP/ch")"
code=$(curl -s -o /dev/null -D "$TMP/ch" -w '%{http_code}' "${AUTH[@]}" -H 'Origin: https://evil.example' "$U/v1/info")
check "another origin gets no Access-Control-Allow-Origin" test "$code" = 200 -a -z "$(grep -i '^Access-Control-Allow-Origin' "$TMP/ch")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS -H 'Origin: https://evil.example' \
  -H 'Access-Control-Request-Method: POST' "$U/v1/jobs")
check "its preflight: 403" test "$code" = 403
code=$(curl -s -o /dev/null -D "$TMP/ch" -w '%{http_code}' -H 'Origin: https://app.example' "$U/v1/info")
check "CORS does not bypass auth: 401, still with the CORS header" test "$code" = 401 -a \
  -n "$(grep -i '^Access-Control-Allow-Origin: https://app.example' "$TMP/ch")"
kill -TERM $WPID; wait $WPID
start_worker corsall --cors-origin '*' || exit 1
wait_ready || exit 1
curl -s -o /dev/null -D "$TMP/ch" -H 'Origin: https://any.example' "$U/health"
check "--cors-origin '*': Access-Control-Allow-Origin: *" test -n "$(grep -i '^Access-Control-Allow-Origin: \*' "$TMP/ch")"
kill -TERM $WPID; wait $WPID

# ---- IPv6 ----
HOST='[::1]'
start_worker v6 --bind ::1 || exit 1
wait_ready || exit 1
check "--bind ::1 serves on [::1]" test "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200
check "--bind ::1 does not serve on 127.0.0.1" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 000
check "a job over IPv6" test "$(curl -sN "${AUTH[@]}" "$U/v1/echo" -d '{"n":2}' | grep -c '"type":"echo"')" = 2
check "the log names the IPv6 address" test -n "$(grep -F "http://[::1]:$PORT" "$TMP/v6.log")"
kill -TERM $WPID; wait $WPID
start_worker dual --bind :: || exit 1
wait_ready || exit 1
check "--bind :: listens dual-stack: [::1] and 127.0.0.1" test "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200 -a \
  "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200
kill -TERM $WPID; wait $WPID
HOST=127.0.0.1
out=$("$BIN" --bind 'not-an-address' --local-mode 2>&1); rc=$?
check "a bad --bind is a startup error" test $rc -eq 1 -a -n "$(echo "$out" | grep 'bad listen address')"

# ---- TLS ----
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/key.pem" -out "$TMP/cert.pem" -days 1 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/key2.pem" -out "$TMP/cert2.pem" -days 1 -subj /CN=other 2>/dev/null
SCHEME=https
CURLX=(--cacert "$TMP/cert.pem")
start_worker tls --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" || exit 1
wait_ready || exit 1
code=$(curl -s --cacert "$TMP/cert.pem" -o "$TMP/r" -w '%{http_code}' "$U/health")
check "TLS: a client that verifies the certificate gets 200" test "$code" = 200
curl -s -o /dev/null "$U/health"; rc=$?
check "TLS: a client that does not trust the certificate refuses it" test $rc -eq 60
check "TLS: a job stream over HTTPS" test "$(curl -sN --cacert "$TMP/cert.pem" "${AUTH[@]}" "$U/v1/echo" -d '{"n":4}' | grep -c '"type":"echo"')" = 4
check "TLS: plain HTTP to the TLS port gets no HTTP answer" test "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 000
check "TLS: /v1/info says so" test "$(curl -s --cacert "$TMP/cert.pem" "${AUTH[@]}" "$U/v1/info" | jget tls)" = true
kill -TERM $WPID; wait $WPID
SCHEME=http
CURLX=()
out=$("$BIN" --local-mode --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key2.pem" 2>&1); rc=$?
check "TLS: a key that does not match the certificate is a startup error" test $rc -eq 1 -a -n "$(echo "$out" | grep -i 'tls')"
out=$("$BIN" --local-mode --tls-cert "$TMP/cert.pem" 2>&1); rc=$?
check "TLS: --tls-cert without --tls-key is a usage error" test $rc -eq 2
out=$("$BIN" --local-mode --tls-cert "$TMP/nope.pem" --tls-key "$TMP/key.pem" 2>&1); rc=$?
check "TLS: a missing certificate file is a startup error naming it" test $rc -eq 1 -a -n "$(echo "$out" | grep 'nope.pem')"

# ---- environment equivalents ----
RBEE_EVENT_DELAY_MS=7 RBEE_QUEUE_DEPTH=3 start_worker env --queue-depth 4 || exit 1
wait_ready || exit 1
r=$(curl -s "${AUTH[@]}" "$U/v1/info")
check "RBEE_<FLAG> sets a flag; the command line wins" test "$(echo "$r" | jget event_delay_ms)" = 7 -a "$(echo "$r" | jget queue_depth)" = 4
kill -TERM $WPID; wait $WPID
out=$(RBEE_PORT=12x "$BIN" --local-mode 2>&1); rc=$?
check "a bad environment value is a usage error naming the variable" test $rc -eq 2 -a -n "$(echo "$out" | grep 'RBEE_PORT')"
unset RBEE_API_TOKEN
out=$("$BIN" --port 0 2>&1); rc=$?
check "no token and no --local-mode: refuses to start" test $rc -eq 2 -a -n "$(echo "$out" | grep 'RBEE_API_TOKEN')"
AUTH=()
RBEE_LOCAL_MODE=1 start_worker local || exit 1
wait_ready || exit 1
check "RBEE_LOCAL_MODE=1: local mode, no token needed" test "$(curl -s "$U/v1/info" | jget auth)" = false
kill -TERM $WPID; wait $WPID
LLORCH_API_TOKEN=legacy start_worker legacy || exit 1
AUTH=(-H "Authorization: Bearer legacy")
wait_ready || exit 1
check "LLORCH_API_TOKEN still works" test "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "$U/v1/info")" = 200 -a \
  "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/info")" = 401
kill -TERM $WPID; wait $WPID

echo "$PASSES passed, $FAILS failed"
[[ $FAILS -eq 0 ]]
