#!/usr/bin/env python3
"""The worker against a hostile (or merely unusual) client, on 127.0.0.1:
each defect of the hardening issue reproduced against the real binaries
(echo-worker-rbee for the shared layer, llm-worker-rbee where the LLM side
is involved) and checked fixed:

  port already in use; slow-header clients (1,000 connections dribbling
  bytes while a normal client keeps a p99 under a second); queued streams
  kept alive past the idle timeout, with a queued event; half-closed clients
  keep their answer; one subscriber leaving (or a HEAD) cancels nothing;
  client strings of multi-byte characters; invalid UTF-8 in the model path,
  --model-ref and --worker-id; HTTP framing (413 for big bodies, an endless
  chunked upload cut short, unknown transfer codings, conflicting lengths,
  invalid methods, heads the HTTP library refuses counted in the metrics);
  exact numbers in range errors; rbee quantize refusing to overwrite its
  input; load errors naming the path once.

usage: test_hostile.py --echo ECHO_BIN --llm LLM_BIN --rbee RBEE_BIN --model GGUF
"""
import argparse
import http.client
import json
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

PASSES, FAILS = 0, 0
PROCS = []
TMP = tempfile.mkdtemp(prefix="rbee-hostile-")


def check(name, cond, detail=""):
    global PASSES, FAILS
    if cond:
        PASSES += 1
        print(f"ok - {name}", flush=True)
    else:
        FAILS += 1
        print(f"FAIL - {name} {detail}", flush=True)


class Worker:
    def __init__(self, binary, args, env=None, name="w"):
        self.port_file = os.path.join(TMP, f"{name}.port")
        self.log_path = os.path.join(TMP, f"{name}.log")
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        e = dict(os.environ)
        e.pop("RBEE_API_TOKEN", None)
        e.pop("LLORCH_API_TOKEN", None)
        e.update(env or {})
        self.token = e.get("RBEE_API_TOKEN")
        self.proc = subprocess.Popen([binary, "--port", "0", "--port-file", self.port_file] + args, env=e,
                                     stdout=subprocess.DEVNULL, stderr=open(self.log_path, "wb"))
        PROCS.append(self.proc)
        for _ in range(800):
            if os.path.exists(self.port_file) and os.path.getsize(self.port_file) > 0:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited early: {open(self.log_path, 'rb').read()[-2000:]}")
            time.sleep(0.025)
        self.port = int(open(self.port_file).read())
        for _ in range(800):
            st, _, _ = self.req("GET", "/v1/ready")
            if st == 200:
                return
            time.sleep(0.025)
        raise RuntimeError(f"{name} never became ready")

    def headers(self, extra=None):
        h = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        h.update(extra or {})
        return h

    def req(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body) if isinstance(body, (dict, list)) else body
            c.request(method, path, body=data, headers=self.headers(headers))
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        except (OSError, http.client.HTTPException):
            return 0, {}, b""
        finally:
            c.close()

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def raw(port, data, timeout=5.0, half_close=False):
    """Sends bytes, reads until EOF or timeout; returns the bytes read."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    out = b""
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    finally:
        s.close()
    return out


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def sse_events(body):
    """data payloads of an SSE body, comments skipped; returns (events, done, comments)."""
    events, done, comments = [], False, 0
    for block in body.decode("utf-8", "replace").split("\n\n"):
        if not block:
            continue
        if block.startswith(":"):
            comments += 1
            continue
        assert block.startswith("data: "), block
        p = block[6:]
        if p == "[DONE]":
            done = True
        else:
            events.append(json.loads(p))
    return events, done, comments


def metric(w, name):
    _, _, b = w.req("GET", "/metrics")
    for line in b.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def http_body(resp):
    """Body of a raw HTTP/1.1 reply with Content-Length or chunked framing."""
    head, _, rest = resp.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    out = b""
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    return out


def test_port_in_use(echo):
    w = Worker(echo, ["--local-mode"], name="port1")
    p = subprocess.run([echo, "--local-mode", "--port", str(w.port)], capture_output=True, timeout=30)
    check("a busy port is a startup error, exit 1", p.returncode == 1 and b"port" in p.stderr.lower(),
          f"rc={p.returncode} {p.stderr[-300:]}")
    check("the first worker still serves", w.req("GET", "/health")[0] == 200)
    w.stop()


def test_http_framing(echo):
    w = Worker(echo, ["--max-body-bytes", "65536"], env={"RBEE_API_TOKEN": "tok-h"}, name="frame")
    auth = b"Authorization: Bearer tok-h\r\n"
    st, _, body = w.req("POST", "/v1/jobs", b"{" + b" " * 70000 + b"}")
    check("a body over --max-body-bytes: 413 naming the limit",
          st == 413 and json.loads(body)["errors"][0]["constraint"] == "max_bytes", f"{st} {body[:200]}")
    chunk = b"a" * 16384
    req = b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n"
    req += b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(6)) + b"0\r\n\r\n"
    check("a chunked body crossing the limit: 413", status_of(raw(w.port, req)) == 413)
    # an endless chunked upload is cut short, not read to the end
    s = socket.create_connection(("127.0.0.1", w.port))
    s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n")
    sent, t0 = 0, time.time()
    try:
        while sent < 64 << 20 and time.time() - t0 < 60:
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
    except OSError:
        pass
    s.close()
    check("a 64 MiB chunked upload is refused before 16 MiB are read", sent < 16 << 20, f"sent {sent}")
    t0 = time.time()
    r = raw(w.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: gzip\r\n\r\nabc")
    check("Transfer-Encoding other than chunked: 501 at once", status_of(r) == 501 and time.time() - t0 < 3,
          f"{r[:60]} {time.time() - t0:.1f}s")
    r = raw(w.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth +
            b"Content-Length: 7\r\nContent-Length: 8\r\n\r\n{\"n\":1} ")
    check("two different Content-Length headers: 400", status_of(r) == 400, r[:60])
    r = raw(w.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth +
            b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    check("Content-Length with chunked: 400", status_of(r) == 400, r[:60])
    r = raw(w.port, b"G\xc3(T /health HTTP/1.1\r\nHost: x\r\n\r\n")
    check("a method that is not a token: 400/501, never 500", status_of(r) in (400, 501), r[:60])
    before = metric(w, 'llorch_requests_total{route="other",status="rejected"}') or 0
    r = raw(w.port, b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
    after = metric(w, 'llorch_requests_total{route="other",status="rejected"}') or 0
    check("a head the HTTP library refuses is counted in the metrics", status_of(r) == 400 and after == before + 1,
          f"{r[:40]} {before} -> {after}")
    w.stop()


def test_half_close(echo, llm):
    w = Worker(llm, ["--local-mode", "--parallel", "2"], name="halfllm")
    body = json.dumps({"prompt": "And God said", "max_tokens": 8, "temperature": 0}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    req = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    r = raw(w.port, req, timeout=60, half_close=True)
    ok = status_of(r) == 200
    try:
        ok = ok and json.loads(http_body(r))["usage"]["completion_tokens"] == 8
    except (ValueError, KeyError):
        ok = False
    check("a half-closed client gets its whole completion", ok, r[:200])
    body = json.dumps({"prompt": "And God said", "max_tokens": 8, "temperature": 0, "stream": True}).encode()
    r = raw(w.port, head + b"Content-Length: %d\r\n\r\n" % len(body) + body, timeout=60, half_close=True)
    check("a half-closed client gets its whole stream", status_of(r) == 200 and b"data: [DONE]" in r, r[-200:])
    check("...and nothing was cancelled", (metric(w, "llorch_jobs_cancelled_total") or 0) == 0)
    w.stop()
    e = Worker(echo, ["--local-mode"], name="halfecho")
    body = b'{"n": 20}'
    r = raw(e.port, b"POST /v1/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) +
            body, timeout=30, half_close=True)
    check("echo: a half-closed client's stream completes", r.count(b'"type":"echo"') == 20 and b"[DONE]" in r)
    e.stop()


def test_queue_keepalive(echo, llm):
    e = Worker(echo, ["--local-mode", "--http-timeout", "1", "--event-delay-ms", "10"], name="keepalive")
    res = {}

    def long_job():
        res["a"] = e.req("POST", "/v1/echo", {"n": 300}, timeout=60)

    t = threading.Thread(target=long_job)
    t.start()
    time.sleep(0.3)
    st, _, body = e.req("POST", "/v1/echo", {"n": 5}, timeout=60)  # waits ~3 s behind the first
    t.join()
    ev, done, comments = sse_events(body)
    check("a stream queued past --http-timeout is kept alive and completes",
          st == 200 and done and comments >= 1 and [x["type"] for x in ev][-1] == "end" and
          sum(x["type"] == "echo" for x in ev) == 5, f"{st} comments={comments} {body[:200]}")
    check("...and so does the stream ahead of it", res["a"][0] == 200 and b"[DONE]" in res["a"][2])
    e.stop()
    w = Worker(llm, ["--local-mode", "--parallel", "1", "--http-timeout", "1"], name="queued")
    a = w.req("POST", "/v1/jobs", {"prompt": "And", "max_tokens": 300, "temperature": 0, "ignore_eos": True})
    b = w.req("POST", "/v1/jobs", {"prompt": "And God", "max_tokens": 5, "temperature": 0})
    ja, jb = json.loads(a[2])["job_id"], json.loads(b[2])["job_id"]
    st, _, body = w.req("GET", f"/v1/jobs/{jb}/stream")
    ev, done, _ = sse_events(body)
    types = [x["type"] for x in ev]
    check("a job waiting for a slot streams queued (position 1), then started ... end",
          done and types[0] == "queued" and ev[0]["position"] == 1 and types[1] == "started" and types[-1] == "end",
          str(types[:3]))
    w.req("DELETE", f"/v1/jobs/{ja}")
    w.stop()


def test_subscribers(echo):
    e = Worker(echo, ["--local-mode", "--event-delay-ms", "10"], name="subs")
    job = json.loads(e.req("POST", "/v1/jobs", {"n": 200})[2])["job_id"]
    st, hd, body = e.req("HEAD", f"/v1/jobs/{job}/stream")
    check("HEAD on a stream: 200, an event stream, no body", st == 200 and "event-stream" in hd.get("Content-Type", "")
          and body == b"")
    s1 = socket.create_connection(("127.0.0.1", e.port))
    s1.sendall(f"GET /v1/jobs/{job}/stream HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = {}

    def second():
        got["b"] = e.req("GET", f"/v1/jobs/{job}/stream", timeout=60)

    t = threading.Thread(target=second)
    t.start()
    s1.settimeout(10)
    data = b""
    while data.count(b'"type":"echo"') < 3:
        data += s1.recv(4096)
    s1.close()  # one subscriber leaves
    t.join()
    ev, done, _ = sse_events(got["b"][2])
    check("one subscriber leaving cancels nothing: the other's stream ends DONE",
          done and ev[-1]["type"] == "end" and ev[-1]["stop_reason"] == "DONE", str(ev[-1:]))
    e.stop()


def test_strings(llm, model):
    w = Worker(llm, ["--local-mode"], name="strings")
    name = "é" * 128
    st, _, body = w.req("POST", "/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 4, "stream": True})
    ev, done, _ = sse_events(body)
    check("a model field of 128 two-byte characters: every chunk carries it whole",
          st == 200 and done and len(ev) >= 3 and all(x.get("model") == name for x in ev), body[:200])
    w.stop()
    d = os.path.join(TMP, "utf8")
    os.makedirs(d, exist_ok=True)
    bad = os.path.join(d.encode(), b"m\xff\xfeodel.gguf")
    os.symlink(os.path.abspath(model).encode(), bad)
    w = Worker(llm, ["--local-mode", "--model", bad.decode("utf-8", "surrogateescape")], name="badpath")
    st1, _, b1 = w.req("GET", "/v1/models")
    st2, _, b2 = w.req("GET", "/v1/info")
    st3, _, b3 = w.req("POST", "/v1/completions", {"prompt": "And", "max_tokens": 3})
    ok = st1 == 200 and st2 == 200 and st3 == 200
    try:
        ok = ok and json.loads(b1)["data"][0]["id"] == "m\ufffd\ufffdodel.gguf" and json.loads(b3)["usage"]
    except (ValueError, KeyError, IndexError):
        ok = False
    check("a model path that is not UTF-8: /v1/models, /v1/info and completions still answer", ok, f"{b1[:120]}")
    w.stop()
    for flag in ("--worker-id", "--model-ref"):
        p = subprocess.run([llm, "--local-mode", "--port", "0", flag.encode(), b"w\xff"], capture_output=True,
                           timeout=30)
        check(f"{flag} that is not UTF-8: a usage error", p.returncode == 2 and b"UTF-8" in p.stderr, p.stderr[-200:])
    w = Worker(llm, ["--local-mode"], name="range")
    st, _, body = w.req("POST", "/v1/completions", {"prompt": "x", "temperature": 2.0000001})
    check("range errors print the value exactly", st == 400 and b"2.0000001" in body, body[:200])
    w.stop()


def test_slow_headers(echo):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    e = Worker(echo, ["--local-mode", "--header-timeout", "3"], name="slow")
    stop = threading.Event()
    n_attack = 1000
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000

    def attacker():
        socks = {}
        while not stop.is_set():
            while len(socks) < n_attack and not stop.is_set():
                try:
                    s = socket.socket()
                    s.setblocking(False)
                    s.connect_ex(("127.0.0.1", e.port))
                    socks[s] = 0
                except OSError:
                    time.sleep(0.01)
                    break
            for s in list(socks):
                try:
                    s.send(head[socks[s]:socks[s] + 1])
                    socks[s] = (socks[s] + 1) % len(head)
                    r, _, _ = select.select([s], [], [], 0)
                    if r and not s.recv(1024):
                        raise OSError("closed")
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    s.close()
                    del socks[s]
            time.sleep(0.5)
        for s in socks:
            s.close()

    t = threading.Thread(target=attacker)
    t.start()
    time.sleep(2.0)
    lat = []
    t_end = time.time() + 8
    while time.time() < t_end:
        t0 = time.time()
        st, _, _ = e.req("GET", "/health", timeout=5)
        lat.append(time.time() - t0 if st == 200 else 99.0)
        time.sleep(0.05)
    stop.set()
    t.join()
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    dropped = metric(e, "llorch_http_connections_dropped_total") or 0
    print(f"# slow-header attack: {n_attack} dribbling connections, {len(lat)} normal requests, "
          f"p50 {1e3 * lat[len(lat) // 2]:.1f} ms, p99 {1e3 * p99:.1f} ms, connections dropped {dropped:.0f}", flush=True)
    check("under 1,000 slow-header connections a normal client keeps a p99 under a second",
          len(lat) >= 20 and p99 < 1.0, f"p99 {p99:.2f}s")
    check("stalled connections were dropped (counted in /metrics)", dropped > 0)
    e.stop()


def test_load_error(llm):
    bad = os.path.join(TMP, "broken.gguf")
    with open(bad, "wb") as f:
        f.write(b"not a gguf file")
    p = subprocess.run([llm, "--local-mode", "--port", "0", "--model", bad], capture_output=True, timeout=60)
    line = [l for l in p.stderr.decode().splitlines() if "model_load_failed" in l]
    check("a load error names the path once", p.returncode == 1 and line and line[0].count(bad) == 1, str(line))


def test_quantize(rbee, model):
    p = os.path.join(TMP, "q.gguf")
    shutil.copy(model, p)
    r = subprocess.run([rbee, "quantize", p, p, "q8_0", "--quiet"], capture_output=True, timeout=120)
    check("rbee quantize IN IN refuses to overwrite its input", r.returncode != 0 and b"refusing" in r.stderr,
          r.stderr[-200:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--echo", required=True)
    ap.add_argument("--llm", required=True)
    ap.add_argument("--rbee", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    try:
        test_port_in_use(a.echo)
        test_http_framing(a.echo)
        test_half_close(a.echo, a.llm)
        test_queue_keepalive(a.echo, a.llm)
        test_subscribers(a.echo)
        test_strings(a.llm, a.model)
        test_quantize(a.rbee, a.model)
        test_load_error(a.llm)
        test_slow_headers(a.echo)
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"{PASSES} passed, {FAILS} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
