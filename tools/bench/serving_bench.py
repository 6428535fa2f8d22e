#!/usr/bin/env python3
"""Benchmark (not a test): a serving load against OpenAI-compatible servers (llm-worker-rbee, llama-server).

N closed-loop clients (each sends its next request when its previous one has ended) send streamed
/v1/completions (or, with --chat, /v1/chat/completions) requests with a seeded mix of prompt and output
lengths, temperature 0 and `ignore_eos: true` with `max_tokens` set, so that every output has its planned
length on both servers (llm-worker-rbee and llama-server both honour `ignore_eos`). Reports aggregate
output tokens/s over the wall time, requests/s, time to first token (TTFT), inter-token latency (ITL),
time per output token (TPOT) and end-to-end time percentiles, and every error (HTTP errors, refused
connections, broken streams, outputs of the wrong length are counted and listed, never dropped).

Targets (one, or two with --compare: the same seeded load against each, one after the other):
  --url http://HOST:PORT          a running server
  --worker "BIN [ARGS]"           starts llm-worker-rbee: adds --local-mode --port 0 --port-file F, and
                                  --parallel CLIENTS and --ctx-size C unless ARGS give them; ready when
                                  GET /v1/ready says so
  --llama-server "BIN [ARGS]"     starts llama.cpp's llama-server: adds --host 127.0.0.1 --port P and
                                  --metrics, and -np CLIENTS and -c CLIENTS*C unless ARGS give
                                  -np/--parallel and -c/--ctx-size; ready when GET /health answers 200
C, the context per sequence, covers the longest planned prompt and output (+10% and 64 tokens; with
--shared-prefix N: N + 64 and the output), rounded up to 256. llama-server caps it at the model's
training context. A started
server's output goes to a temporary file; it is stopped (SIGTERM) at the end and the end of its log is
printed when it fails to start or exits with a status other than 0.
--compare prints both targets' figures side by side and their ratio first/second (for tokens/s above 1
means the first is faster; for latencies below 1 means the first is faster).

Prompts are words drawn (seeded) from a list of common English words. When the server offers llama-server's
POST /tokenize (both do), each prompt's word count is fitted so that its text tokenizes to the planned
count (the nearest count not above it where words hold several tokens); otherwise one word is planned as
one token. The prompt tokens reported come from the server's `usage` (requested with
`stream_options: {include_usage: true}`) when it gives them, else from the plan; the report says which.
With --compare the plan is fitted on the first target and the same texts go to the second.

Timing, per request, from the client's clock (time.perf_counter) when each SSE line is read:
  TTFT  request sent -> the first chunk with content (completions: non-empty `text`; chat: non-empty
        `delta.content` or `delta.reasoning_content`; a chat's first role-only chunk is not content)
  ITL   the gaps between consecutive content chunks, pooled over all requests. Assumed: one generated token
        per content chunk, which is what both servers send (each token as soon as it is sampled); a token
        whose bytes end inside a UTF-8 character is held back by both and sent with the next, so such a
        chunk carries 2+ tokens and its gap covers 2+ steps. Chunks are not split: where `usage` counts
        more tokens than there were content chunks the difference is reported as `merged_tokens` (the
        row "output tokens sent with another"). Servers differ there: on a random-weight GGUF whose
        vocabulary is mostly byte tokens, llm-worker-rbee sent a third of the tokens with the next one
        and llama-server none (it sends bytes that are not yet valid UTF-8 as U+FFFD); where that count
        is large, compare TPOT, not ITL
  TPOT  per request, (last content chunk - first content chunk) / (output tokens - 1): exact whatever
        the chunking
  e2e   request sent -> the end of the stream (`data: [DONE]`)
The clients are threads of this process; the interpreter's thread switch interval is lowered to 0.5 ms
so that a chunk's reader waits at most about that for the interpreter while other clients parse theirs.
Percentiles interpolate linearly between the closest ranks (rank = (n - 1) * p / 100; numpy's default).
Aggregate output tokens/s = output tokens of the completed requests / wall time (the first request sent to
the last stream's end); warm-up requests (--warmup) are excluded.

--duration S stops starting requests after S seconds (at most --requests in all; the plan of --requests
is made before the clock starts). Exit status: 0; 1 when a server fails to start or exits with a status
other than 0 when stopped (after the report); 2 for a bad command line; 3 when any request failed or had
the wrong length (after the report).

Errors: `http_NNN` (a status other than 200), `connect` (refused, reset or timed out before an answer),
`broken_stream` (the connection ended, was reset or stayed silent for --timeout before `data: [DONE]`, or
a line that is not valid SSE or an event that is not a chunk), `stream_error` (an
`{"error": ...}` event), `no_content` (a stream without a content chunk), `client_exception` (a defect of
this script, counted rather than lost). `wrong_length`: completed
requests whose output token count differs from the plan (counted apart; their times are kept).
Server counters: the generated and prompt token totals of GET /metrics (llm-worker-rbee's
llorch_tokens_out_total / llorch_tokens_in_total, llama-server's llamacpp:tokens_predicted_total /
llamacpp:prompt_tokens_total with --metrics) read before and after the load; their differences are
reported beside the client's sums.

--shared-prefix N replaces the load by the prefix-reuse scenario: for each of --repeat pairs, request A
with an N-token prompt (fitted as above, a fresh prefix each pair), then request B whose prompt is A's
followed by 8 more words; both with max_tokens = the smallest --output-len (at most 16), one at a time. Reports both
TTFTs and B/A per pair and their medians (B/A near 1: no reuse; the issue's goal is < 0.10 at N = 2000).

usage: serving_bench.py (--url URL | --worker CMD | --llama-server CMD) [--compare (a second target)]
         [--clients 4] [--requests 64 | --duration S] [--prompt-len 128:1024] [--output-len 64:256]
         [--chat] [--seed 1] [--warmup 2] [--shared-prefix N [--repeat 3]] [--json FILE]
e.g.  serving_bench.py --worker "build/gcc/apps/llm-worker-rbee/llm-worker-rbee --model M.gguf" \\
        --llama-server "llama-server -m M.gguf -ngl 99 -fa on" --compare --clients 32 --requests 256
Standard library only (the GPU machine has no pip).
"""
import argparse
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

WORDS = (
    'the of and to in a is that for it as was with be by on not he this are or his from at which but have '
    'an they you were her she there one all we their been has when who will more no if out so said what up '
    'its about into than them can only other new some could time these two may then do first any my now '
    'such like our over man me even most made after also did many before must through back years where '
    'much your way well down should because each just those people how too little state good very make '
    'world still own see men work long get here between both life being under never day same another know '
    'while last might us great old year off come since against go came right used take three small house '
    'water around place again found light night name city river stone tree field table letter road '
    'morning garden window music paper story summer winter spring market bridge island mountain valley '
    'village forest ocean harbor station kitchen doctor teacher farmer painter sailor soldier '
    'engine wheel bottle basket candle hammer ladder pocket mirror pillow blanket button carpet ribbon').split()

# the counters of GET /metrics: (generated tokens, prompt tokens) per server family
COUNTERS = {'rbee': ('llorch_tokens_out_total', 'llorch_tokens_in_total'),
            'llama': ('llamacpp:tokens_predicted_total', 'llamacpp:prompt_tokens_total')}
PREFIX_SUFFIX_WORDS = 8


class UsageError(Exception):
    """A bad command line or setting: reported with exit status 2."""


# ---------------------------------------------------------------- helpers (unit-tested)

def percentile(values, p):
    """The p-th percentile (0..100) of values, linear between the closest ranks; None when empty."""
    if not 0 <= p <= 100:
        raise ValueError(f'percentile {p} is outside 0..100')
    v = sorted(values)
    if not v:
        return None
    rank = (len(v) - 1) * p / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def parse_range(text, name):
    """'A:B' (uniform integers A..B) or 'A' (fixed) -> (A, B); positive integers, A <= B."""
    parts = text.split(':')
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        lo, hi = int(parts[0]), int(parts[-1])
    except ValueError:
        raise UsageError(f'{name} must be N or LO:HI (integers), not {text!r}') from None
    if lo < 1 or hi < lo:
        raise UsageError(f'{name} {text!r}: need 1 <= LO <= HI')
    return lo, hi


class SseParser:
    """Server-sent events, fed line by line (bytes or str); feed() returns the data of an event when the
    blank line that ends it arrives, else None. Comment lines (':') and other fields are skipped; several
    data lines join with newlines. A line that is not SSE raises ValueError."""

    def __init__(self):
        self.data = None

    def feed(self, line):
        if isinstance(line, bytes):
            line = line.decode('utf-8')
        line = line.rstrip('\r\n')
        if line == '':
            d, self.data = self.data, None
            return d
        if line.startswith(':'):
            return None
        field, sep, value = line.partition(':')
        if not sep and field not in ('data', 'event', 'id', 'retry'):
            raise ValueError(f'not a server-sent-event line: {line[:80]!r}')
        if value.startswith(' '):
            value = value[1:]
        if field == 'data':
            self.data = value if self.data is None else self.data + '\n' + value
        return None


def chunk_fields(obj, chat):
    """(content text or '', finish_reason or None, usage or None, timings or None) of one stream chunk."""
    text, finish = '', None
    choices = obj.get('choices') or []
    if choices:
        c = choices[0]
        if chat:
            d = c.get('delta') or {}
            text = (d.get('content') or '') + (d.get('reasoning_content') or '')
        else:
            text = c.get('text') or ''
        finish = c.get('finish_reason')
    return text, finish, obj.get('usage'), obj.get('timings')


def stats(values):
    """{n, mean, p50, p90, p99, max} of a list of seconds (None fields when empty)."""
    if not values:
        return {'n': 0, 'mean': None, 'p50': None, 'p90': None, 'p99': None, 'max': None}
    return {'n': len(values), 'mean': sum(values) / len(values), 'p50': percentile(values, 50),
            'p90': percentile(values, 90), 'p99': percentile(values, 99), 'max': max(values)}


# ---------------------------------------------------------------- HTTP

class Endpoint:
    def __init__(self, url, api_key=None, timeout=600.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ('http', 'https') or not u.hostname:
            raise UsageError(f'--url must be http(s)://HOST:PORT, not {url!r}')
        self.url = url.rstrip('/')
        self.https = u.scheme == 'https'
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.base = u.path.rstrip('/')
        self.headers = {'Authorization': f'Bearer {api_key}'} if api_key else {}
        self.timeout = timeout

    def conn(self, timeout=None):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout or self.timeout)

    def call(self, method, path, body=None, timeout=30.0):
        """(status, body bytes); raises OSError / http.client.HTTPException on transport errors."""
        c = self.conn(timeout)
        try:
            hdr = dict(self.headers)
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                hdr['Content-Type'] = 'application/json'
            c.request(method, self.base + path, body=data, headers=hdr)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def get_json(self, path):
        """The JSON answer of GET path, or None (not 200, not JSON, unreachable)."""
        try:
            st, b = self.call('GET', path)
            return json.loads(b) if st == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None


def stream_request(ep, path, body, chat, clock=time.perf_counter):
    """Sends one streamed request and times its chunks. Returns a record: t_sent (clock), ttft, e2e,
    chunk_times (seconds after t_sent of each content chunk), usage, timings, finish_reason, error."""
    rec = {'error': None, 'detail': None, 'usage': None, 'timings': None, 'finish_reason': None,
           'chunk_times': [], 'ttft': None, 'e2e': None}
    data = json.dumps(body).encode()
    hdr = dict(ep.headers)
    hdr['Content-Type'] = 'application/json'
    hdr['Accept'] = 'text/event-stream'
    c = ep.conn()
    started = False
    t0 = clock()
    rec['t_sent'] = t0
    try:
        c.request('POST', ep.base + path, body=data, headers=hdr)
        r = c.getresponse()
        if r.status != 200:
            rec['error'] = f'http_{r.status}'
            rec['detail'] = r.read()[:300].decode('utf-8', 'replace')
            return rec
        started = True
        sse = SseParser()
        done = False
        while not done:
            line = r.readline()
            t = clock()
            if not line:
                break
            payload = sse.feed(line)
            if payload is None:
                continue
            if payload == '[DONE]':
                rec['e2e'] = t - t0
                done = True
                break
            obj = json.loads(payload)
            if not isinstance(obj, dict):
                raise ValueError(f'a stream event that is not a JSON object: {payload[:80]!r}')
            if 'error' in obj and not obj.get('choices'):
                rec['error'] = 'stream_error'
                rec['detail'] = json.dumps(obj['error'])[:300]
                return rec
            text, finish, usage, timings = chunk_fields(obj, chat)
            if text:
                rec['chunk_times'].append(t - t0)
            if finish:
                rec['finish_reason'] = finish
            if usage:
                rec['usage'] = usage
            if timings:
                rec['timings'] = timings
        if not done:
            rec['error'] = 'broken_stream'
            rec['detail'] = 'the connection ended before data: [DONE]'
            return rec
    except (ValueError, TypeError, AttributeError) as e:  # not SSE, not JSON, or JSON of another shape
        rec['error'] = 'broken_stream'
        rec['detail'] = f'{type(e).__name__}: {e}'[:300]
        return rec
    except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out: before or during the stream
        rec['error'] = 'broken_stream' if started else 'connect'
        rec['detail'] = f'{type(e).__name__}: {e}'[:300]
        return rec
    finally:
        c.close()
    if not rec['chunk_times']:
        rec['error'] = 'no_content'
        rec['detail'] = 'the stream ended without a content chunk'
        return rec
    rec['ttft'] = rec['chunk_times'][0]
    return rec


# ---------------------------------------------------------------- servers

def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def has_flag(argv, *names):
    return any(a in names or any(a.startswith(n + '=') for n in names) for a in argv)


def flag_value(argv, *names):
    """The integer after the last of names (or in NAME=V) in argv; None when absent or not an integer."""
    v = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                v = argv[i + 1]
            elif a.startswith(n + '='):
                v = a[len(n) + 1:]
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


class Target:
    """One server to measure: a URL, or a program this script starts and stops."""

    def __init__(self, kind, spec, label):
        self.kind, self.spec, self.label = kind, spec, label
        self.proc = None
        self.ep = None
        self.dir = None
        self.argv = None
        self.log_path = None

    def family(self):
        return {'worker': 'rbee', 'llama-server': 'llama'}.get(self.kind)

    def start(self, opts, ctx_per_seq):
        if self.kind == 'url':
            self.ep = Endpoint(self.spec, opts.api_key, opts.timeout)
            self.wait_ready(opts.ready_timeout)
            return
        argv = shlex.split(self.spec)
        if not argv:
            raise UsageError(f'--{self.kind} needs a program')
        self.dir = tempfile.mkdtemp(prefix='serving-bench-')
        self.log_path = os.path.join(self.dir, 'server.log')
        if self.kind == 'worker':
            port_file = os.path.join(self.dir, 'port')
            argv += ['--local-mode', '--port', '0', '--port-file', port_file]
            if not has_flag(argv, '--parallel'):
                argv += ['--parallel', str(opts.clients)]
            if not has_flag(argv, '--ctx-size'):
                argv += ['--ctx-size', str(ctx_per_seq)]
        else:
            port = free_port()
            argv += ['--host', '127.0.0.1', '--port', str(port)]
            if not has_flag(argv, '--metrics'):
                argv += ['--metrics']
            slots = flag_value(argv, '-np', '--parallel')
            if slots is None:
                slots = opts.clients
                argv += ['-np', str(slots)]
            if not has_flag(argv, '-c', '--ctx-size'):
                argv += ['-c', str(ctx_per_seq * slots)]
        self.argv = argv
        log = open(self.log_path, 'wb')
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        except OSError as e:
            raise UsageError(f'cannot start {argv[0]}: {e}') from None
        finally:
            log.close()
        deadline = time.monotonic() + opts.ready_timeout
        if self.kind == 'worker':
            port = 0
            while not port:
                self.check_alive()
                try:
                    with open(port_file) as f:
                        port = int(f.read().strip() or 0)
                except (OSError, ValueError):
                    pass
                if not port:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f'{self.label}: no port after {opts.ready_timeout} s:\n' + self.log_tail())
                    time.sleep(0.02)
        self.ep = Endpoint(f'http://127.0.0.1:{port}', opts.api_key, opts.timeout)
        self.wait_ready(max(1.0, deadline - time.monotonic()))

    def check_alive(self):
        if self.proc and self.proc.poll() is not None:
            raise RuntimeError(f'{self.label} exited with status {self.proc.returncode} before it was ready:\n'
                               + self.log_tail())

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, 'rb') as f:
                return f.read()[-n:].decode('utf-8', 'replace')
        except (OSError, TypeError):
            return ''

    def ready(self):
        """llm-worker-rbee: GET /v1/ready answers {"ready": true} (its /health answers 200 while it
        loads); llama-server: GET /health answers 200 (503 while it loads); a --url: the first of these
        that it has."""
        try:
            if self.kind != 'llama-server':
                st, b = self.ep.call('GET', '/v1/ready', timeout=10)
                if st != 404 or self.kind == 'worker':
                    return st == 200 and json.loads(b).get('ready') is True
            st, _ = self.ep.call('GET', '/health', timeout=10)
            return st == 200
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            return False

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while not self.ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f'{self.label} at {self.ep.url} not ready after {timeout:.0f} s:\n'
                                   + self.log_tail())
            time.sleep(0.05)

    def stop(self):
        """Stops a started server (SIGTERM, then SIGKILL after 30 s); returns its exit status (None: not
        started here)."""
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        status = self.proc.returncode
        self.proc = None
        return status

    def cleanup(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def identity(self):
        """What the server says it is: parts of GET /props and the ids of GET /v1/models."""
        out = {}
        props = self.ep.get_json('/props')
        if isinstance(props, dict):
            gs = props.get('default_generation_settings') or {}
            for k in ('build_info', 'model_path', 'model_alias', 'total_slots'):
                if k in props:
                    out[k] = props[k]
            if isinstance(gs, dict) and 'n_ctx' in gs:
                out['n_ctx'] = gs['n_ctx']
        models = self.ep.get_json('/v1/models')
        if isinstance(models, dict) and isinstance(models.get('data'), list):
            out['models'] = [m.get('id') for m in models['data'] if isinstance(m, dict)]
        return out

    def counters(self):
        """{name: value} of the token counters in GET /metrics (empty when there are none)."""
        try:
            st, b = self.ep.call('GET', '/metrics')
        except (OSError, http.client.HTTPException):
            return {}
        if st != 200:
            return {}
        names = {n for pair in COUNTERS.values() for n in pair}
        out = {}
        for line in b.decode('utf-8', 'replace').splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in names:
                try:
                    out[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        return out


# ---------------------------------------------------------------- the plan

class Tokenizer:
    """Counts a text's tokens with the server's POST /tokenize (no special tokens), when it has one."""

    def __init__(self, ep):
        self.ep = ep
        self.ok = self.count('hello world') is not None

    def count(self, text):
        """Tokens of text, or None where the server does not tokenize."""
        try:
            st, b = self.ep.call('POST', '/tokenize', {'content': text, 'add_special': False})
            toks = json.loads(b).get('tokens') if st == 200 else None
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            return None
        return len(toks) if isinstance(toks, list) else None

    def counter(self):
        """count() for fit_words: a failure mid-plan stops the run."""
        def f(text):
            n = self.count(text)
            if n is None:
                raise RuntimeError('POST /tokenize failed while the prompts were planned')
            return n
        return f


def fit_words(words, target, count):
    """The number of leading words whose text has `target` tokens by count(text), or the largest count
    below it (at least one word). count: text -> tokens; words: enough of them (3 per target token)."""
    n = max(1, min(len(words), target))
    best = None  # (tokens, words) of the largest count <= target seen
    seen = {}
    for _ in range(12):
        if n in seen:
            break
        c = count(' '.join(words[:n]))
        seen[n] = c
        if c == target:
            return n, c
        if c < target and (best is None or c > best[0]):
            best = (c, n)
        per_word = c / n
        step = int(round((target - c) / per_word)) if per_word > 0 else 1
        if step == 0:
            step = 1 if c < target else -1
        n = max(1, min(len(words), n + step))
    if best is None:
        return 1, seen.get(1) if 1 in seen else count(words[0])
    # walk up one word at a time from the best count below the target
    c, n = best
    while n < len(words):
        c2 = seen.get(n + 1)
        if c2 is None:
            c2 = count(' '.join(words[:n + 1]))
        if c2 > target:
            break
        c, n = c2, n + 1
        if c == target:
            break
    return n, c


def make_spec(i, seed, prompt_range, output_range, tokenizer=None):
    """Request i of the plan: {index, prompt, prompt_tokens_planned, prompt_tokens_asked, max_tokens}, the
    same for the same seed and i (and the same tokenizer when one fits the prompt)."""
    rng = random.Random(seed * 1000003 + i)
    p = rng.randint(*prompt_range)
    o = rng.randint(*output_range)
    words = [rng.choice(WORDS) for _ in range(3 * p + 8)]
    if tokenizer is not None and tokenizer.ok:
        nw, tokens = fit_words(words, p, tokenizer.counter())
    else:
        nw, tokens = p, p
    return {'index': i, 'prompt': ' '.join(words[:nw]), 'prompt_tokens_planned': tokens, 'prompt_tokens_asked': p,
            'max_tokens': o}


def make_plan(n, seed, prompt_range, output_range, tokenizer=None):
    return [make_spec(i, seed, prompt_range, output_range, tokenizer) for i in range(n)]


def request_body(spec, chat, model):
    body = {'max_tokens': spec['max_tokens'], 'temperature': 0, 'ignore_eos': True, 'stream': True,
            'stream_options': {'include_usage': True}, 'seed': 1}
    if chat:
        body['messages'] = [{'role': 'user', 'content': spec['prompt']}]
    else:
        body['prompt'] = spec['prompt']
    if model:
        body['model'] = model
    return body


# ---------------------------------------------------------------- running

def finish_record(rec, spec):
    """Adds the token counts and per-request figures to a stream_request record."""
    rec['index'] = spec['index']
    rec['max_tokens'] = spec['max_tokens']
    rec['prompt_tokens_planned'] = spec['prompt_tokens_planned']
    u = rec.get('usage') or {}
    rec['prompt_tokens'] = u.get('prompt_tokens')
    rec['completion_tokens'] = u.get('completion_tokens')
    times = rec['chunk_times']
    rec['content_chunks'] = len(times)
    rec['itl'] = [b - a for a, b in zip(times, times[1:])]
    n = rec['completion_tokens'] if rec['completion_tokens'] is not None else len(times)
    rec['output_tokens'] = n
    rec['merged_tokens'] = max(0, n - len(times)) if rec['error'] is None else 0
    rec['tpot'] = (times[-1] - times[0]) / (n - 1) if rec['error'] is None and n > 1 and len(times) > 1 else None
    rec['wrong_length'] = rec['error'] is None and n != spec['max_tokens']
    return rec


def run_load(target, plan, opts, duration=None):
    """Closed loop: opts.clients threads take the next planned request until the plan (or the duration)
    runs out. Returns (records in plan order, wall seconds)."""
    path = '/v1/chat/completions' if opts.chat else '/v1/completions'
    lock = threading.Lock()
    state = {'next': 0}
    records = []
    t_begin = time.perf_counter()
    t_end = [t_begin]

    def client():
        while True:
            with lock:
                i = state['next']
                if i >= len(plan) or (duration is not None and time.perf_counter() - t_begin >= duration):
                    return
                state['next'] += 1
            spec = plan[i]
            try:
                rec = stream_request(target.ep, path, request_body(spec, opts.chat, opts.model), opts.chat)
            except Exception as e:  # a defect here, not the server's: counted all the same, never lost
                rec = {'error': 'client_exception', 'detail': f'{type(e).__name__}: {e}'[:300], 'usage': None,
                       'timings': None, 'finish_reason': None, 'chunk_times': [], 'ttft': None, 'e2e': None,
                       't_sent': None}
            rec = finish_record(rec, spec)
            with lock:
                records.append(rec)
                t_end[0] = max(t_end[0], time.perf_counter())

    threads = [threading.Thread(target=client, daemon=True) for _ in range(opts.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records.sort(key=lambda r: r['index'])
    return records, t_end[0] - t_begin


def summarize(records, wall):
    ok = [r for r in records if r['error'] is None]
    errors = {}
    for r in records:
        if r['error']:
            errors[r['error']] = errors.get(r['error'], 0) + 1
    out_tokens = sum(r['output_tokens'] for r in ok)
    usage_prompt = [r['prompt_tokens'] for r in ok if r['prompt_tokens'] is not None]
    from_usage = len(usage_prompt) == len(ok) and bool(ok)
    prompt_tokens = sum(usage_prompt) if from_usage else sum(r['prompt_tokens_planned'] for r in ok)
    itl = [g for r in ok for g in r['itl']]
    return {
        'requests': len(records), 'completed': len(ok), 'errors': errors,
        'error_examples': [{'index': r['index'], 'error': r['error'], 'detail': r['detail']}
                           for r in records if r['error']][:5],
        'wrong_length': sum(1 for r in ok if r['wrong_length']),
        'merged_tokens': sum(r['merged_tokens'] for r in ok),
        'wall_s': wall,
        'output_tokens': out_tokens,
        'output_tokens_source': 'usage' if ok and all(r['completion_tokens'] is not None for r in ok)
        else 'content chunks',
        'prompt_tokens': prompt_tokens,
        'prompt_tokens_source': 'usage' if from_usage else 'plan',
        'output_tokens_per_s': out_tokens / wall if wall > 0 else None,
        'total_tokens_per_s': (out_tokens + prompt_tokens) / wall if wall > 0 else None,
        'requests_per_s': len(ok) / wall if wall > 0 else None,
        'ttft_s': stats([r['ttft'] for r in ok]),
        'itl_s': stats(itl),
        'tpot_s': stats([r['tpot'] for r in ok if r['tpot'] is not None]),
        'e2e_s': stats([r['e2e'] for r in ok]),
    }


def ctx_per_seq(prompt_hi, output_hi, chat):
    need = int(prompt_hi * 1.1) + 64 + output_hi + (64 if chat else 0)
    return (need + 255) // 256 * 256


def warm_up(target, opts):
    path = '/v1/chat/completions' if opts.chat else '/v1/completions'
    for i in range(opts.warmup):
        spec = {'index': -1 - i, 'prompt': ' '.join(WORDS[i:i + 16]), 'max_tokens': 8, 'prompt_tokens_planned': 16}
        rec = stream_request(target.ep, path, request_body(spec, opts.chat, opts.model), opts.chat)
        if rec['error']:
            raise RuntimeError(f'{target.label}: the warm-up request failed: {rec["error"]} {rec["detail"]}')


def counter_deltas(before, after, family):
    out = {}
    for fam, (gen, prompt) in COUNTERS.items():
        if family not in (None, fam):
            continue
        for key, name in (('generated', gen), ('prompt', prompt)):
            if name in before and name in after:
                out[key] = after[name] - before[name]
                out[key + '_name'] = name
    return out


def prefix_max_tokens(opts):
    return min(opts.output_range[0], 16)


def shared_prefix(target, opts, tokenizer):
    """Pairs of (A: N-token prompt, B: A's prompt + 8 words), one request at a time."""
    path = '/v1/chat/completions' if opts.chat else '/v1/completions'
    max_tokens = prefix_max_tokens(opts)
    pairs = []
    for k in range(opts.repeat):
        rng = random.Random(opts.seed * 7919 + 104729 + k)
        n = opts.shared_prefix
        words = [rng.choice(WORDS) for _ in range(3 * n + 8)]
        if tokenizer is not None and tokenizer.ok:
            nw, tokens = fit_words(words, n, tokenizer.counter())
        else:
            nw, tokens = n, n
        a_text = ' '.join(words[:nw])
        b_text = a_text + ' ' + ' '.join(rng.choice(WORDS) for _ in range(PREFIX_SUFFIX_WORDS))
        res = {'pair': k, 'prefix_tokens_planned': tokens}
        for name, text in (('a', a_text), ('b', b_text)):
            spec = {'index': k, 'prompt': text, 'max_tokens': max_tokens, 'prompt_tokens_planned': tokens}
            rec = finish_record(stream_request(target.ep, path, request_body(spec, opts.chat, opts.model),
                                               opts.chat), spec)
            res[name] = {k2: rec[k2] for k2 in ('ttft', 'e2e', 'error', 'detail', 'prompt_tokens',
                                                'completion_tokens', 'timings')}
        ok = res['a']['error'] is None and res['b']['error'] is None
        res['b_over_a'] = res['b']['ttft'] / res['a']['ttft'] if ok and res['a']['ttft'] > 0 else None
        pairs.append(res)
    good = [p for p in pairs if p['b_over_a'] is not None]
    return {'prefix_tokens': opts.shared_prefix, 'suffix_words': PREFIX_SUFFIX_WORDS, 'max_tokens': max_tokens,
            'pairs': pairs, 'errors': len(pairs) - len(good),
            'ttft_a_p50': percentile([p['a']['ttft'] for p in good], 50) if good else None,
            'ttft_b_p50': percentile([p['b']['ttft'] for p in good], 50) if good else None,
            'b_over_a_p50': percentile([p['b_over_a'] for p in good], 50) if good else None}


def measure(target, opts, plan_holder):
    """Starts (or reaches) one target, runs the scenario, stops it. plan_holder: [plan, how it was fitted],
    made on the first target and reused for the second."""
    out = {'label': target.label, 'kind': target.kind, 'spec': target.spec}
    if opts.shared_prefix:  # B: the prefix and 8 words (of up to 8 tokens each where words split into bytes)
        ctx = ctx_per_seq(opts.shared_prefix + 8 * PREFIX_SUFFIX_WORDS, prefix_max_tokens(opts), opts.chat)
    else:
        ctx = ctx_per_seq(opts.prompt_range[1], opts.output_range[1], opts.chat)
    try:
        t0 = time.perf_counter()
        target.start(opts, ctx)
        out['ready_s'] = time.perf_counter() - t0
        out['argv'] = target.argv
        out['url'] = target.ep.url
        out['server'] = target.identity()
        warm_up(target, opts)
        tok = None if opts.no_tokenize else Tokenizer(target.ep)
        if opts.shared_prefix:
            out['prefix'] = shared_prefix(target, opts, tok)
            return out
        if not plan_holder:
            plan_holder += [make_plan(opts.requests, opts.seed, opts.prompt_range, opts.output_range, tok),
                            'tokenize' if tok is not None and tok.ok else 'words']
        out['prompt_fit'] = plan_holder[1]
        before = target.counters()
        records, wall = run_load(target, plan_holder[0], opts, opts.duration)
        after = target.counters()
        out['summary'] = summarize(records, wall)
        out['counters'] = counter_deltas(before, after, target.family())
        out['requests'] = [{k: r[k] for k in ('index', 'error', 'detail', 'prompt_tokens_planned', 'prompt_tokens',
                                              'max_tokens', 'completion_tokens', 'content_chunks', 'merged_tokens',
                                              'ttft', 'tpot', 'e2e', 'finish_reason', 't_sent', 'chunk_times')}
                           for r in records]
        return out
    finally:
        status = target.stop()
        if status not in (None, 0) and 'ready_s' in out:  # (before that, the error said it with the log)
            out['server_exit'] = status
            out['server_log_tail'] = target.log_tail(2000)
            print(f'serving_bench: {target.label} exited with status {status}; the end of its log:\n'
                  + out['server_log_tail'], file=sys.stderr)
        target.cleanup()


# ---------------------------------------------------------------- reporting

def ms(v):
    if v is None:
        return '-'
    return f'{1e3 * v:.2f}' if v < 0.01 else f'{1e3 * v:.1f}'


def num(v, fmt='{:.1f}'):
    return '-' if v is None else fmt.format(v)


ROWS = ['output tokens/s', 'requests/s', 'completed / requests', 'errors', 'TTFT p50 / p90 / p99 ms',
        'ITL p50 / p90 / p99 ms', 'output tokens sent with another (ITL counts one gap)', 'TPOT p50 / p99 ms',
        'e2e p50 / p99 ms']


def row_values(s):
    def trio(st):
        return f'{ms(st["p50"])} / {ms(st["p90"])} / {ms(st["p99"])}'

    def duo(st):
        return f'{ms(st["p50"])} / {ms(st["p99"])}'
    err = ', '.join(f'{k} {v}' for k, v in sorted(s['errors'].items())) or '0'
    if s['wrong_length']:
        err += f'; wrong_length {s["wrong_length"]}'
    return [num(s['output_tokens_per_s']), num(s['requests_per_s'], '{:.2f}'), f'{s["completed"]} / {s["requests"]}',
            err, trio(s['ttft_s']), trio(s['itl_s']), f'{s["merged_tokens"]} of {s["output_tokens"]}', duo(s['tpot_s']),
            duo(s['e2e_s'])]


def ratio_values(a, b):
    def r(x, y):
        return '-' if x is None or y is None or y == 0 else f'{x / y:.2f}'
    keys = [('output_tokens_per_s',), ('requests_per_s',), None, None, ('ttft_s', 'p50', 'p90', 'p99'),
            ('itl_s', 'p50', 'p90', 'p99'), None, ('tpot_s', 'p50', 'p99'), ('e2e_s', 'p50', 'p99')]
    out = []
    for k in keys:
        if k is None:
            out.append('')
        elif len(k) == 1:
            out.append(r(a[k[0]], b[k[0]]))
        else:
            out.append(' / '.join(r(a[k[0]][p], b[k[0]][p]) for p in k[1:]))
    return out


def describe(t):
    s = t.get('server', {})
    bits = [f'{k} {s[k]}' for k in ('build_info', 'model_alias', 'total_slots', 'n_ctx') if k in s]
    if 'models' in s and 'model_alias' not in s:
        bits.append('models ' + ','.join(str(m) for m in s['models']))
    if 'model_path' in s:
        bits.append(f'file {s["model_path"]}')
    return f'{t["label"]} ({t["kind"]}{", " + t["url"] if "url" in t else ""}): ' + ('; '.join(bits) or 'no /props')


def print_report(report, f=None):
    f = f or sys.stdout
    st = report['settings']
    targets = report['targets']
    for t in targets:
        print(describe(t), file=f)
        if t.get('argv'):
            print('  command: ' + ' '.join(shlex.quote(a) for a in t['argv']), file=f)
    if st['shared_prefix']:
        print(f'\nshared prefix: {st["shared_prefix"]} tokens, then {PREFIX_SUFFIX_WORDS} more words; '
              f'{st["repeat"]} pairs; TTFT ms', file=f)
        print('| target | pair | prefix tokens | A TTFT | B TTFT | B/A |', file=f)
        print('|---|---|---|---|---|---|', file=f)
        for t in targets:
            p = t['prefix']
            for q in p['pairs']:
                ba = num(q['b_over_a'], '{:.3f}') if q['b_over_a'] is not None else \
                    f'error: {q["a"]["error"] or q["b"]["error"]}'
                print(f'| {t["label"]} | {q["pair"]} | {q["a"]["prompt_tokens"] or q["prefix_tokens_planned"]} '
                      f'| {ms(q["a"]["ttft"])} | {ms(q["b"]["ttft"])} | {ba} |', file=f)
            print(f'| {t["label"]} | median | | {ms(p["ttft_a_p50"])} | {ms(p["ttft_b_p50"])} '
                  f'| {num(p["b_over_a_p50"], "{:.3f}")} |', file=f)
        return
    s0 = targets[0]['summary']
    load = f'{st["requests"]} requests' + ('' if st['duration_s'] is None else f' or {st["duration_s"]} s')
    print(f'\nload: {st["clients"]} clients, {load}, {st["endpoint"]}, prompt {st["prompt_len"]} tokens '
          f'(fitted by {targets[0].get("prompt_fit")}), output {st["output_len"]} tokens, seed {st["seed"]}; '
          f'prompt tokens from {s0["prompt_tokens_source"]}, output tokens from {s0["output_tokens_source"]}',
          file=f)
    labels = [t['label'] for t in targets]
    head = ['metric'] + labels + ([f'{labels[0]}/{labels[1]}'] if len(targets) == 2 else [])
    print('| ' + ' | '.join(head) + ' |', file=f)
    print('|' + '---|' * len(head), file=f)
    cols = [row_values(t['summary']) for t in targets]
    if len(targets) == 2:
        cols.append(ratio_values(targets[0]['summary'], targets[1]['summary']))
    for i, name in enumerate(ROWS):
        print('| ' + ' | '.join([name] + [c[i] for c in cols]) + ' |', file=f)
    for t in targets:
        s, c = t['summary'], t.get('counters', {})
        line = (f'{t["label"]}: wall {s["wall_s"]:.2f} s, {s["output_tokens"]} output and {s["prompt_tokens"]} '
                'prompt tokens')
        if 'generated' in c:
            line += f'; server counters: {c["generated"]:.0f} generated, {c.get("prompt", float("nan")):.0f} prompt'
        print(line, file=f)
        for e in s['error_examples']:
            print(f'  request {e["index"]}: {e["error"]}: {e["detail"]}', file=f)


# ---------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument('--url', action='append', default=[], help='a running server, http://HOST:PORT')
    ap.add_argument('--worker', action='append', default=[], help='"llm-worker-rbee [ARGS]" to start')
    ap.add_argument('--llama-server', action='append', default=[], help='"llama-server [ARGS]" to start')
    ap.add_argument('--compare', action='store_true', help='two targets, the same load on each, ratios side by side')
    ap.add_argument('--clients', type=int, default=4)
    ap.add_argument('--requests', type=int, default=64, help='requests in all (the plan; with --duration, at most)')
    ap.add_argument('--duration', type=float, help='stop starting requests after this many seconds')
    ap.add_argument('--prompt-len', default='128:1024', help='N or LO:HI tokens (uniform)')
    ap.add_argument('--output-len', default='64:256', help='N or LO:HI tokens (uniform)')
    ap.add_argument('--chat', action='store_true', help='/v1/chat/completions instead of /v1/completions')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--warmup', type=int, default=2, help='short requests before the timed load (not counted)')
    ap.add_argument('--shared-prefix', type=int, default=0, metavar='N', help='the prefix-reuse scenario instead')
    ap.add_argument('--repeat', type=int, default=3, help='pairs of the --shared-prefix scenario')
    ap.add_argument('--no-tokenize', action='store_true', help='plan one word per token (no POST /tokenize)')
    ap.add_argument('--model', help='the "model" field of the requests (default: none)')
    ap.add_argument('--api-key', help='sent as Authorization: Bearer KEY')
    ap.add_argument('--timeout', type=float, default=600.0, help='seconds a request may stay silent')
    ap.add_argument('--ready-timeout', type=float, default=600.0, help='seconds a server may take to be ready')
    ap.add_argument('--json', help='write the report (settings, servers, summaries, every request) here')
    a = ap.parse_args(argv)
    targets = []
    # keep the command line's order: the first target named is A of the ratios
    order = []
    for i, tok in enumerate(argv):
        for kind, opt in (('url', '--url'), ('worker', '--worker'), ('llama-server', '--llama-server')):
            if tok == opt or tok.startswith(opt + '='):
                order.append((i, kind))
    specs = {'url': list(a.url), 'worker': list(a.worker), 'llama-server': list(a.llama_server)}
    names = {'url': 'server', 'worker': 'rbee', 'llama-server': 'llama-server'}
    for _, kind in order:
        targets.append(Target(kind, specs[kind].pop(0), names[kind]))
    if len(targets) == 2 and targets[0].label == targets[1].label:
        targets[0].label += '-1'
        targets[1].label += '-2'
    if not targets:
        raise UsageError('name a target: --url, --worker or --llama-server')
    if a.compare and len(targets) != 2:
        raise UsageError(f'--compare needs exactly two targets ({len(targets)} given)')
    if not a.compare and len(targets) != 1:
        raise UsageError(f'{len(targets)} targets given: add --compare to measure two')
    if a.clients < 1:
        raise UsageError('--clients must be at least 1')
    if a.requests < 1:
        raise UsageError('--requests must be at least 1')
    if a.duration is not None and a.duration <= 0:
        raise UsageError('--duration must be positive')
    if a.warmup < 0 or a.repeat < 1 or a.shared_prefix < 0:
        raise UsageError('--warmup must be >= 0, --repeat >= 1, --shared-prefix >= 0')
    if a.timeout <= 0 or a.ready_timeout <= 0:
        raise UsageError('--timeout and --ready-timeout must be positive')
    a.prompt_range = parse_range(a.prompt_len, '--prompt-len')
    a.output_range = parse_range(a.output_len, '--output-len')
    for t in targets:
        if t.kind == 'url':
            Endpoint(t.spec)  # checks the form
    return a, targets


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, targets = parse_args(argv)
    except UsageError as e:
        print(f'serving_bench: {e}', file=sys.stderr)
        return 2
    report = {'settings': {'clients': opts.clients, 'requests': opts.requests,
                           'duration_s': opts.duration, 'prompt_len': opts.prompt_len, 'output_len': opts.output_len,
                           'endpoint': '/v1/chat/completions' if opts.chat else '/v1/completions',
                           'seed': opts.seed, 'warmup': opts.warmup, 'shared_prefix': opts.shared_prefix,
                           'repeat': opts.repeat, 'temperature': 0, 'ignore_eos': True,
                           'command': ['serving_bench.py'] + list(argv),
                           'date_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())},
              'targets': []}
    plan_holder = []
    sys.setswitchinterval(0.0005)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f'signal {signum}')
    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    try:
        for t in targets:
            report['targets'].append(measure(t, opts, plan_holder))
    except (RuntimeError, UsageError) as e:
        print(f'serving_bench: {e}', file=sys.stderr)
        rc = 1
    except KeyboardInterrupt:
        print('serving_bench: interrupted', file=sys.stderr)
        rc = 130
    finally:
        for t in targets:
            t.stop()
    if rc == 0:
        if len(report['targets']) == 2 and not opts.shared_prefix:
            a, b = (t['summary'] for t in report['targets'])
            report['ratios'] = {'labels': [report['targets'][0]['label'], report['targets'][1]['label']],
                                'output_tokens_per_s': a['output_tokens_per_s'] / b['output_tokens_per_s']
                                if a['output_tokens_per_s'] and b['output_tokens_per_s'] else None}
            for k in ('ttft_s', 'itl_s', 'tpot_s', 'e2e_s'):
                for p in ('p50', 'p90', 'p99'):
                    x, y = a[k][p], b[k][p]
                    report['ratios'][f'{k[:-2]}_{p}'] = x / y if x is not None and y else None
        print_report(report)
    if opts.json and report['targets']:
        with open(opts.json, 'w') as f:
            json.dump(report, f)
    if rc == 0 and any('server_exit' in t for t in report['targets']):
        rc = 1  # a server that did not stop cleanly (its log was printed)
    if rc == 0:
        bad = [t['label'] for t in report['targets']
               if t.get('summary', {}).get('errors') or t.get('summary', {}).get('wrong_length')
               or t.get('prefix', {}).get('errors')]
        if bad:
            print(f'serving_bench: failed requests or outputs of the wrong length: {", ".join(bad)}', file=sys.stderr)
            rc = 3
    return rc


if __name__ == '__main__':
    sys.exit(main())
