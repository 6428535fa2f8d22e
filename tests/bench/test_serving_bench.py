#!/usr/bin/env python3
"""Tests of tools/bench/serving_bench.py.

units: the helpers against hand-computed values and the standard library's statistics.quantiles
  (percentiles), the SSE parser and chunk reading, the prompt fitting; then the timing math against a fake
  OpenAI server in this process that streams chunks at known moments and records when it sent each (the
  same clock): TTFT, every inter-token gap and the end-to-end time must match the server's send times
  within a scheduling tolerance far below the gaps, so that timing from the wrong chunk fails; and every
  error kind (HTTP status, cut stream, error event, bad JSON, no content, wrong length) counted, end to end
  through main() with its exit status.
worker: serving_bench.py against the real llm-worker-rbee on the bundled model (CPU): every request
  complete, output token counts equal to the plan, prompt counts equal to the fitted plan plus BOS, the
  summary's figures recomputed from the per-request records, the worker's own /metrics token counters
  equal to the client's sums; the shared-prefix scenario; --compare of two worker settings on identical
  prompts; bad command lines and a worker that cannot start.

usage: test_serving_bench.py units BENCH_PY
       test_serving_bench.py worker BENCH_PY WORKER_BIN MODEL
"""
import http.server
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

FAILS = []
PASSES = [0]


def check(name, cond, detail=''):
    if cond:
        PASSES[0] += 1
    else:
        FAILS.append(name)
        print(f'FAIL: {name} {detail}', flush=True)


def close(a, b, tol=1e-12):
    return a is not None and b is not None and abs(a - b) <= tol


def load(path):
    spec = importlib.util.spec_from_file_location('serving_bench', path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


# ---------------------------------------------------------------- helpers

def test_percentile(sb):
    v = [50, 15, 40, 20, 35]  # sorted: 15 20 35 40 50
    for p, want in ((0, 15), (100, 50), (50, 35), (40, 29), (90, 46), (99, 49.6), (25, 20), (75, 40)):
        check(f'percentile p{p}', close(sb.percentile(v, p), want, 1e-9), sb.percentile(v, p))
    check('percentile of one value', sb.percentile([7.5], 99) == 7.5)
    check('percentile of none', sb.percentile([], 50) is None)
    for bad in (-1, 100.5):
        try:
            sb.percentile(v, bad)
            check(f'percentile {bad} refused', False)
        except ValueError:
            check(f'percentile {bad} refused', True)
    # the standard library's inclusive quantiles use the same interpolation
    rng = random.Random(5)
    for n in (2, 3, 10, 101, 1000):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        q = statistics.quantiles(xs, n=100, method='inclusive')
        worst = max(abs(sb.percentile(xs, p) - q[p - 1]) for p in range(1, 100))
        check(f'percentile = statistics.quantiles inclusive, n={n}', worst < 1e-12, worst)
    s = sb.stats([0.3, 0.1, 0.2])
    check('stats', s['n'] == 3 and close(s['mean'], 0.2, 1e-15) and close(s['p50'], 0.2) and s['max'] == 0.3
          and close(s['p90'], 0.28, 1e-15), s)
    check('stats empty', sb.stats([])['p99'] is None)


def test_parse_range(sb):
    check('range fixed', sb.parse_range('5', 'x') == (5, 5))
    check('range lo:hi', sb.parse_range('2:9', 'x') == (2, 9))
    for bad in ('0:3', '9:2', 'a', '1:2:3', '', '3:', '-1'):
        try:
            sb.parse_range(bad, '--prompt-len')
            check(f'range {bad!r} refused', False)
        except sb.UsageError as e:
            check(f'range {bad!r} refused naming the option', '--prompt-len' in str(e), e)


def test_sse(sb):
    p = sb.SseParser()
    got = [p.feed(x) for x in (b': keep-alive\n', b'\n', b'data: {"a":1}\n', b'\n', b'data:x\r\n', b'\r\n',
                               b'event: msg\n', b'data: one\n', b'data:  two\n', b'\n', 'id: 7\n', '\n',
                               b'data: [DONE]\n', b'\n')]
    check('sse events', [g for g in got if g is not None] == ['{"a":1}', 'x', 'one\n two', '[DONE]'], got)
    check('sse comment-only block yields nothing', got[1] is None and got[11] is None, got)
    try:
        sb.SseParser().feed(b'garbage line\n')
        check('sse refuses a non-SSE line', False)
    except ValueError:
        check('sse refuses a non-SSE line', True)
    f = sb.chunk_fields
    check('completion chunk', f({'choices': [{'text': ' hi', 'finish_reason': None}]}, False) == (' hi', None, None,
                                                                                                    None))
    check('completion finish chunk', f({'choices': [{'text': '', 'finish_reason': 'length'}],
                                        'usage': {'completion_tokens': 3}, 'timings': {'x': 1}}, False)
          == ('', 'length', {'completion_tokens': 3}, {'x': 1}))
    check('chat role chunk is not content', f({'choices': [{'delta': {'role': 'assistant', 'content': ''}}]}, True)[0]
          == '')
    check('chat content', f({'choices': [{'delta': {'content': 'a'}}]}, True)[0] == 'a')
    check('chat reasoning counts as content', f({'choices': [{'delta': {'reasoning_content': 'r'}}]}, True)[0] == 'r')
    check('usage chunk without choices', f({'choices': [], 'usage': {'prompt_tokens': 2}}, True)
          == ('', None, {'prompt_tokens': 2}, None))


def test_fit(sb):
    words = ['w%d' % i for i in range(300)]
    one = sb.fit_words(words, 57, lambda t: len(t.split()))
    check('fit, one token a word', one == (57, 57), one)
    # three tokens a word: 100 is not reachable, 99 is the nearest below
    three = sb.fit_words(words, 100, lambda t: 3 * len(t.split()))
    check('fit, three tokens a word', three == (33, 99), three)
    # words of 1 or 2 tokens (irregular): the count found must be exact where reachable
    cost = [1 + (i * 7 % 3 == 1) for i in range(300)]
    for target in (1, 2, 40, 123):
        n, c = sb.fit_words(words, target, lambda t: sum(cost[:len(t.split())]))
        best = max(sum(cost[:k]) for k in range(1, 301) if sum(cost[:k]) <= target)
        check(f'fit irregular {target}', c == best and sum(cost[:n]) == c, (n, c, best))
    big = sb.fit_words(words, 1, lambda t: 2 * len(t.split()))
    check('fit, one word already above the target', big == (1, 2), big)


# ---------------------------------------------------------------- the fake server

class FakeState:
    def __init__(self):
        self.lock = threading.Lock()
        self.log = {}
        self.generated = 0
        self.prompt = 0


STATE = FakeState()


class Fake(http.server.BaseHTTPRequestHandler):
    """An OpenAI-ish server whose behaviour the request's "model" field picks."""
    protocol_version = 'HTTP/1.0'

    def log_message(self, *a):
        pass

    def reply(self, status, obj, ctype='application/json'):
        b = (json.dumps(obj) if ctype == 'application/json' else obj).encode()
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    # as a separate process (fake-server): 'rbee' or 'llama' names, readiness and counters; the number
    # of readiness polls answered "not yet" (rbee: /v1/ready false while /health says 200; llama:
    # /health 503); the slots
    flavour = 'rbee'
    not_ready = 0
    slots = 2

    def loading(self):
        with STATE.lock:
            if Fake.not_ready > 0:
                Fake.not_ready -= 1
                return True
        return False

    def do_GET(self):
        rbee = Fake.flavour == 'rbee'
        if self.path == '/v1/ready' and rbee:
            self.reply(200, {'ready': not self.loading()})
        elif self.path == '/health':
            self.reply(503 if not rbee and self.loading() else 200, {'status': 'ok'})
        elif self.path == '/props':
            self.reply(200, {'build_info': f'fake {Fake.flavour}', 'total_slots': Fake.slots, 'model_path': '/m.gguf',
                             'default_generation_settings': {'n_ctx': 512}})
        elif self.path == '/v1/models':
            self.reply(200, {'data': [{'id': 'fake-model'}]})
        elif self.path == '/metrics':
            with STATE.lock:
                g, p = STATE.generated, STATE.prompt
            if rbee:
                text = f'# TYPE x counter\nllorch_tokens_out_total {g}\nllorch_tokens_in_total {p}\n'
            else:
                text = f'llamacpp:prompt_tokens_total {p}\nllamacpp:tokens_predicted_total {g}\n'
            self.reply(200, text, 'text/plain')
        else:
            self.reply(404, {'error': 'no'})

    def send_event(self, obj, sends):
        data = obj if isinstance(obj, str) else json.dumps(obj)
        sends.append(time.perf_counter())  # before the write: the client cannot read it earlier
        self.wfile.write(f'data: {data}\n\n'.encode())
        self.wfile.flush()

    def do_POST(self):
        t_recv = time.perf_counter()
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        if Fake.not_ready > 0:  # a request before the server said it was ready
            self.reply(503, {'error': {'message': 'loading'}})
            return
        if self.path == '/tokenize':
            self.reply(200, {'tokens': list(range(len(body['content'].split())))})
            return
        mode = body.get('model') or 'normal'
        chat = self.path == '/v1/chat/completions'
        prompt = body['messages'][0]['content'] if chat else body['prompt']
        n_prompt = len(prompt.split()) + 1
        if mode == 'http500':
            self.reply(500, {'error': {'message': 'boom'}})
            return
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream')
        self.end_headers()
        sends = []
        content_sends = []
        with STATE.lock:  # filled in as it goes: the client may read [DONE] before this thread runs again
            STATE.log[mode] = {'recv': t_recv, 'content': content_sends, 'sends': sends}

        def chunk(text):
            if chat:
                return {'choices': [{'index': 0, 'delta': {'content': text}, 'finish_reason': None}]}
            return {'choices': [{'index': 0, 'text': text, 'finish_reason': None}]}

        def usage(n_out):
            return {'choices': [], 'usage': {'prompt_tokens': n_prompt, 'completion_tokens': n_out}}
        n_out = body['max_tokens']
        if mode in ('timed', 'timed-chat'):
            # role chunk (chat) or an empty-text chunk (completions) first: not content
            time.sleep(0.10)
            self.send_event({'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}}]} if chat
                            else chunk(''), sends)
            for pause, text in ((0.25, ' a'), (0.12, ' b'), (0.30, ' c'), (0.20, ' d')):
                time.sleep(pause)
                self.send_event(chunk(text), sends)
                content_sends.append(sends[-1])
            n_out = 4
        elif mode == 'merged':
            for text in (' a', ' b\u00e9', ' c'):  # 4 tokens, the 2nd and 3rd in one chunk
                time.sleep(0.01)
                self.send_event(chunk(text), sends)
            n_out = 4
        elif mode == 'nocontent':
            self.send_event(chunk(''), sends)
            n_out = 1
        elif mode == 'errorevent':
            self.send_event(chunk(' a'), sends)
            self.send_event({'error': {'message': 'the request was cancelled', 'code': 'cancelled'}}, sends)
            return
        elif mode == 'badjson':
            self.send_event(chunk(' a'), sends)
            self.send_event('{"choices": [', sends)
            return
        elif mode == 'stall':
            self.send_event(chunk(' a'), sends)
            time.sleep(1.0)
            return
        elif mode == 'shape':
            self.send_event({'choices': 5}, sends)
            return
        elif mode == 'short':
            n_out = max(1, n_out - 1)
            for _ in range(n_out):
                self.send_event(chunk(' x'), sends)
        else:  # normal and cut: max_tokens content chunks 2 ms apart (an "EOS" after 1 without ignore_eos)
            if body.get('ignore_eos') is not True or body.get('temperature') != 0 or body.get('stream') is not True \
                    or body.get('stream_options') != {'include_usage': True}:
                n_out = 1
            for i in range(n_out):
                time.sleep(0.002)
                self.send_event(chunk(' x'), sends)
                if mode == 'cut' and i == 1:
                    return  # HTTP/1.0: the connection closes without [DONE]
        with STATE.lock:
            STATE.generated += n_out
            STATE.prompt += n_prompt
        self.send_event({'choices': [{'index': 0, 'text': '', 'finish_reason': 'length'}]}, sends)
        self.send_event(usage(n_out), sends)
        self.send_event('[DONE]', sends)


def start_fake():
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Fake)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_address[1]}'


def timing_checks(sb, ep, mode, chat, tol):
    """[(name, ok, detail)] of one timed stream."""
    path = '/v1/chat/completions' if chat else '/v1/completions'
    spec = {'index': 0, 'prompt': 'one two three', 'max_tokens': 4, 'prompt_tokens_planned': 3}
    rec = sb.finish_record(sb.stream_request(ep, path, sb.request_body(spec, chat, mode), chat), spec)
    log = STATE.log[mode]
    out = [(f'{mode}: no error', rec['error'] is None, rec),
           (f'{mode}: 4 content chunks (the first, empty chunk is not one)', rec['content_chunks'] == 4, rec)]
    if rec['content_chunks'] != 4 or rec['error']:
        return out
    abs_times = [rec['t_sent'] + t for t in rec['chunk_times']]
    lags = [a - s for a, s in zip(abs_times, log['content'])]
    out.append((f'{mode}: each content chunk read after it was sent, within {tol} s', all(0 <= x <= tol for x in lags),
                lags))
    out.append((f'{mode}: request sent before the server got it', rec['t_sent'] <= log['recv'], None))
    ttft_ref = log['content'][0] - rec['t_sent']
    out.append((f'{mode}: TTFT = first content chunk (0.35 s after the request)',
                0 <= rec['ttft'] - ttft_ref <= tol and rec['ttft'] == rec['chunk_times'][0], (rec['ttft'], ttft_ref)))
    gaps_ref = [b - a for a, b in zip(log['content'], log['content'][1:])]
    out.append((f'{mode}: ITL = the gaps between content chunks', len(rec['itl']) == 3 and
                all(abs(g - r) <= tol for g, r in zip(rec['itl'], gaps_ref)), (rec['itl'], gaps_ref)))
    out.append((f'{mode}: ITL ordered as sent (0.12, 0.30, 0.20)', rec['itl'][0] < rec['itl'][2] < rec['itl'][1],
                rec['itl']))
    times = rec['chunk_times']
    out.append((f'{mode}: ITL exact differences', all(close(g, b - a) for g, a, b in zip(rec['itl'], times, times[1:])),
                None))
    e2e_ref = log['sends'][-1] - rec['t_sent']
    out.append((f'{mode}: e2e = [DONE]', 0 <= rec['e2e'] - e2e_ref <= tol and rec['e2e'] >= rec['chunk_times'][-1],
                (rec['e2e'], e2e_ref)))
    out.append((f'{mode}: TPOT = (last - first) / (n - 1)',
                close(rec['tpot'], (rec['chunk_times'][-1] - rec['chunk_times'][0]) / 3), rec['tpot']))
    out.append((f'{mode}: tokens from usage', rec['completion_tokens'] == 4 and rec['prompt_tokens'] == 4 and
                not rec['wrong_length'] and rec['merged_tokens'] == 0, rec))
    return out


def test_timing(sb, url):
    """The fake server's send times are the reference. A chunk read more than tol after it was sent (the
    machine busy elsewhere) makes the attempt void, and it is repeated, up to 5 times: a timing taken from
    the wrong chunk is off by 0.08 s or more in every attempt."""
    ep = sb.Endpoint(url)
    tol = 0.06
    for mode, chat in (('timed', False), ('timed-chat', True)):
        for attempt in range(5):
            res = timing_checks(sb, ep, mode, chat, tol)
            if all(ok for _, ok, _ in res) or attempt == 4:
                break
            print(f'note: {mode}: attempt {attempt + 1} off by more than {tol} s, repeated', flush=True)
        for name, ok, detail in res:
            check(name, ok, detail)


def test_errors(sb, url):
    ep = sb.Endpoint(url)
    spec = {'index': 3, 'prompt': 'a b', 'max_tokens': 5, 'prompt_tokens_planned': 2}

    def one(mode):
        return sb.finish_record(sb.stream_request(ep, '/v1/completions', sb.request_body(spec, False, mode), False),
                                spec)
    r = one('merged')
    check('merged: 3 chunks, 4 tokens, 1 merged, TPOT over 3 steps', r['error'] is None and r['content_chunks'] == 3
          and r['completion_tokens'] == 4 and r['merged_tokens'] == 1 and len(r['itl']) == 2
          and close(r['tpot'], (r['chunk_times'][2] - r['chunk_times'][0]) / 3) and r['wrong_length'], r)
    for mode, kind in (('http500', 'http_500'), ('cut', 'broken_stream'), ('errorevent', 'stream_error'),
                       ('badjson', 'broken_stream'), ('nocontent', 'no_content')):
        r = one(mode)
        check(f'{mode} -> {kind}', r['error'] == kind and r['ttft'] is None and r['tpot'] is None, r)
    r = one('shape')
    check('an event of another shape -> broken_stream', r['error'] == 'broken_stream' and 'TypeError' in r['detail'], r)
    r = sb.stream_request(sb.Endpoint(url, timeout=0.3), '/v1/completions', sb.request_body(spec, False, 'stall'),
                          False)
    check('a stream silent past --timeout -> broken_stream', r['error'] == 'broken_stream' and
          len(r['chunk_times']) == 1, r)
    r = one('short')
    check('short -> completed, wrong_length', r['error'] is None and r['completion_tokens'] == 4 and r['wrong_length'],
          r)
    r = sb.stream_request(sb.Endpoint('http://127.0.0.1:9'), '/v1/completions', {}, False)
    check('refused connection -> connect', r['error'] == 'connect', r)
    # the summary counts them all
    recs = [one(m) for m in ('normal', 'cut', 'http500', 'normal', 'short')]
    s = sb.summarize(recs, 2.0)
    check('summary counts errors by kind', s['errors'] == {'broken_stream': 1, 'http_500': 1} and s['completed'] == 3
          and s['wrong_length'] == 1 and len(s['error_examples']) == 2, s)
    check('summary tokens/s over the wall time', s['output_tokens'] == 5 + 5 + 4 and
          close(s['output_tokens_per_s'], 14 / 2.0) and close(s['requests_per_s'], 1.5), s)
    ttfts = [r['ttft'] for r in recs if r['error'] is None]
    check('summary TTFT percentiles of the completed requests', close(s['ttft_s']['p50'], sb.percentile(ttfts, 50))
          and close(s['ttft_s']['p99'], sb.percentile(ttfts, 99)) and s['ttft_s']['n'] == 3, s['ttft_s'])
    itl = [g for r in recs if r['error'] is None for g in r['itl']]
    check('summary ITL pooled over requests', s['itl_s']['n'] == len(itl) == 4 + 4 + 3 and
          close(s['itl_s']['p90'], sb.percentile(itl, 90)), s['itl_s'])


def run_main(sb, args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'r.json')
        import contextlib
        import io
        buf_out, buf_err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
            rc = sb.main(args + ['--json', out])
        rep = json.load(open(out)) if os.path.exists(out) else None
    return rc, rep, buf_out.getvalue(), buf_err.getvalue()


def test_main_fake(sb, url):
    with STATE.lock:
        g0, p0 = STATE.generated, STATE.prompt
    rc, rep, out, err = run_main(sb, ['--url', url, '--clients', '3', '--requests', '7', '--prompt-len', '3:9',
                                      '--output-len', '2:6', '--warmup', '1'])
    check('main on the fake server: exit 0', rc == 0, err)
    if rep:
        t = rep['targets'][0]
        s = t['summary']
        reqs = t['requests']
        check('main: every request once, in plan order', [r['index'] for r in reqs] == list(range(7)))
        check('main: prompts fitted by /tokenize (one token a word here)', t['prompt_fit'] == 'tokenize' and
              all(r['prompt_tokens'] == r['prompt_tokens_planned'] + 1 and 3 <= r['prompt_tokens_planned'] <= 9
                  for r in reqs), reqs)
        check('main: output lengths as planned', all(r['completion_tokens'] == r['max_tokens'] for r in reqs) and
              s['wrong_length'] == 0 and s['output_tokens'] == sum(r['max_tokens'] for r in reqs))
        check('main: server counters = client sums (warm-up excluded)',
              t['counters'].get('generated') == s['output_tokens']
              and t['counters'].get('prompt') == s['prompt_tokens'],
              (t['counters'], s['output_tokens'], s['prompt_tokens']))
        with STATE.lock:
            g1 = STATE.generated
        check('main: the warm-up ran but is not counted', g1 - g0 == s['output_tokens'] + 8, (g1 - g0))
        check('main: identity', t['server'].get('build_info') == 'fake rbee'
              and t['server'].get('models') == ['fake-model'])
        check('main: text report', '| output tokens/s |' in out and 'fake rbee' in out, out)
    # the same seed gives the same plan; another seed another
    rc2, rep2, _, _ = run_main(sb, ['--url', url, '--clients', '2', '--requests', '7', '--prompt-len', '3:9',
                                    '--output-len', '2:6', '--warmup', '0'])
    rc3, rep3, _, _ = run_main(sb, ['--url', url, '--clients', '2', '--requests', '7', '--prompt-len', '3:9',
                                    '--output-len', '2:6', '--warmup', '0', '--seed', '2'])

    def plan_of(r):
        return [(q['prompt_tokens_planned'], q['max_tokens']) for q in r['targets'][0]['requests']]
    if rep and rep2 and rep3:
        check('seeded plan reproduces', plan_of(rep) == plan_of(rep2) and plan_of(rep) != plan_of(rep3))
    # every request broken: counted, exit 3
    rc, rep, out, err = run_main(sb, ['--url', url, '--clients', '2', '--requests', '5', '--prompt-len', '4',
                                      '--output-len', '4', '--model', 'cut', '--warmup', '0'])
    check('broken streams: exit 3', rc == 3, (rc, err))
    if rep:
        s = rep['targets'][0]['summary']
        check('broken streams: all counted', s['errors'] == {'broken_stream': 5} and s['completed'] == 0 and
              s['output_tokens'] == 0 and 'broken_stream 5' in out, s)
    # compare: two URLs (the same fake), identical prompts, ratios = a / b
    rc, rep, out, err = run_main(sb, ['--url', url, '--url', url, '--compare', '--clients', '2', '--requests', '4',
                                      '--prompt-len', '3:9', '--output-len', '2:6'])
    check('compare: exit 0', rc == 0, err)
    if rep:
        a, b = rep['targets']
        check('compare: same plan on both', [(q['prompt_tokens_planned'], q['max_tokens']) for q in a['requests']] ==
              [(q['prompt_tokens_planned'], q['max_tokens']) for q in b['requests']])
        check('compare: ratio = a / b', close(rep['ratios']['output_tokens_per_s'],
                                              a['summary']['output_tokens_per_s'] / b['summary']['output_tokens_per_s'],
                                              1e-12) and close(rep['ratios']['ttft_p50'], a['summary']['ttft_s']['p50']
                                                               / b['summary']['ttft_s']['p50'], 1e-12), rep['ratios'])
        check('compare: labels and side-by-side table', a['label'] == 'server-1' and b['label'] == 'server-2' and
              '| metric | server-1 | server-2 | server-1/server-2 |' in out, out)
    # shared prefix on the fake server: the pairs and their ratio
    rc, rep, out, err = run_main(sb, ['--url', url, '--shared-prefix', '20', '--repeat', '2', '--output-len', '3'])
    check('shared prefix: exit 0', rc == 0, err)
    if rep:
        p = rep['targets'][0]['prefix']
        check('shared prefix: B = A + 8 words, ratio = B/A', len(p['pairs']) == 2 and all(
            q['a']['prompt_tokens'] == 21 and q['b']['prompt_tokens'] == 29 and close(q['b_over_a'],
                                                                                     q['b']['ttft'] / q['a']['ttft'])
            for q in p['pairs']), p)
    # bad command lines: exit 2, nothing run
    for args in (['--clients', '0', '--url', url], ['--url', url, '--url', url], ['--url', url, '--compare'],
                 ['--url', url, '--prompt-len', '9:2'], ['--url', 'ftp://x'], [], ['--url', url, '--requests', '0'],
                 ['--url', url, '--output-len', 'x']):
        rc, rep, out, err = run_main(sb, args)
        check(f'bad command line {args[:3]} -> 2', rc == 2 and rep is None and 'serving_bench:' in err, (rc, err))


# ---------------------------------------------------------------- the real worker

def bench(bench_py, args, timeout=240):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'r.json')
        p = subprocess.run([sys.executable, bench_py] + args + ['--json', out], capture_output=True, text=True,
                           timeout=timeout)
        rep = json.load(open(out)) if os.path.exists(out) else None
    return p.returncode, rep, p.stdout, p.stderr


def test_worker(bench_py, worker, model):
    sb = load(bench_py)
    wcmd = f'{worker} --model {model} --threads 2'
    rc, rep, out, err = bench(bench_py, ['--worker', wcmd, '--clients', '3', '--requests', '8', '--prompt-len',
                                         '8:40', '--output-len', '4:12', '--seed', '3'])
    check('worker run: exit 0', rc == 0, out + err)
    if rep:
        t = rep['targets'][0]
        s, reqs = t['summary'], t['requests']
        check('worker: 8 of 8 completed, no errors', s['completed'] == 8 and s['requests'] == 8 and not s['errors'], s)
        check('worker: output tokens as planned', all(r['completion_tokens'] == r['max_tokens'] for r in reqs) and
              s['wrong_length'] == 0, [(r['completion_tokens'], r['max_tokens']) for r in reqs])
        check('worker: one chunk per token', all(r['content_chunks'] == r['completion_tokens'] for r in reqs) and
              s['merged_tokens'] == 0)
        check('worker: prompt = fitted plan + BOS', t['prompt_fit'] == 'tokenize' and
              all(r['prompt_tokens'] == r['prompt_tokens_planned'] + 1 for r in reqs) and
              s['prompt_tokens_source'] == 'usage', [(r['prompt_tokens'], r['prompt_tokens_planned']) for r in reqs])
        check('worker: planned prompt lengths in range', all(8 <= r['prompt_tokens_planned'] <= 40 for r in reqs))
        check('worker: TTFT <= e2e, chunks in order', all(
            0 < r['ttft'] == r['chunk_times'][0] <= r['chunk_times'][-1] <= r['e2e'] and
            r['chunk_times'] == sorted(r['chunk_times']) for r in reqs))
        for k in ('ttft_s', 'itl_s', 'tpot_s', 'e2e_s'):
            st = s[k]
            check(f'worker: {k} percentiles ordered', st['n'] > 0 and st['p50'] <= st['p90'] <= st['p99'] <= st['max'],
                  st)
        check('worker: TTFT p50 recomputed', close(s['ttft_s']['p50'], sb.percentile([r['ttft'] for r in reqs], 50)))
        check('worker: e2e p99 recomputed', close(s['e2e_s']['p99'], sb.percentile([r['e2e'] for r in reqs], 99)))
        itl = [b - a for r in reqs for a, b in zip(r['chunk_times'], r['chunk_times'][1:])]
        check('worker: ITL p90 recomputed', close(s['itl_s']['p90'], sb.percentile(itl, 90), 1e-12))
        check('worker: tokens/s = output tokens / wall', s['output_tokens'] == sum(r['max_tokens'] for r in reqs) and
              close(s['output_tokens_per_s'], s['output_tokens'] / s['wall_s'], 1e-9))
        first = min(r['t_sent'] for r in reqs)
        last = max(r['t_sent'] + r['e2e'] for r in reqs)
        check('worker: wall covers the first request to the last end', 0 <= s['wall_s'] - (last - first) < 1.0,
              (s['wall_s'], last - first))
        c = t['counters']
        check("worker: its /metrics counters equal the client's sums", c.get('generated') == s['output_tokens'] and
              c.get('prompt') == s['prompt_tokens'], (c, s['output_tokens'], s['prompt_tokens']))
        check('worker: identity and command', t['server'].get('total_slots') == 3 and
              '--parallel' in t['argv'] and t['server'].get('model_path', '').endswith(os.path.basename(model)), t)
    # shared prefix: B's prompt is A's + 8 words
    rc, rep, out, err = bench(bench_py, ['--worker', wcmd, '--shared-prefix', '48', '--repeat', '2',
                                         '--output-len', '4'])
    check('worker prefix: exit 0', rc == 0, out + err)
    if rep:
        p = rep['targets'][0]['prefix']
        check('worker prefix: pairs', len(p['pairs']) == 2 and p['errors'] == 0 and all(
            q['a']['prompt_tokens'] == 49 and q['b']['prompt_tokens'] >= 57 and q['a']['completion_tokens'] == 4
            and close(q['b_over_a'], q['b']['ttft'] / q['a']['ttft']) for q in p['pairs']), p)
    # compare two settings of the worker on the same prompts, chat API
    rc, rep, out, err = bench(bench_py, ['--worker', wcmd, '--worker', wcmd + ' --parallel 1', '--compare', '--chat',
                                         '--clients', '2', '--requests', '4', '--prompt-len', '8:24',
                                         '--output-len', '4:8'])
    check('worker compare: exit 0', rc == 0, out + err)
    if rep:
        a, b = rep['targets']
        check('worker compare: the same prompts, every output as planned on both', all(
            x['prompt_tokens'] == y['prompt_tokens']
            and x['completion_tokens'] == y['completion_tokens'] == x['max_tokens']
            for x, y in zip(a['requests'], b['requests'])) and len(a['requests']) == 4, (a['requests'], b['requests']))
        check('worker compare: the settings reached the workers', a['server'].get('total_slots') == 2 and
              b['server'].get('total_slots') == 1)
        check('worker compare: ratio', close(rep['ratios']['output_tokens_per_s'], a['summary']['output_tokens_per_s'] /
                                             b['summary']['output_tokens_per_s'], 1e-12))
    # a worker that cannot start: exit 1 with its log
    rc, rep, out, err = bench(bench_py, ['--worker', f'{worker} --model /nonexistent/m.gguf', '--requests', '1'])
    check('worker that cannot load: exit 1, its log shown', rc == 1 and 'nonexistent' in err, (rc, err))
    rc, rep, out, err = bench(bench_py, ['--worker', '/nonexistent/bin', '--requests', '1'])
    check('missing program: exit 1', rc == 1 and 'cannot start' in err, (rc, err))


def fake_server(args):
    """A started server for serving_bench.py: fake-server rbee|llama EXIT_STATUS [the flags it adds]."""
    import signal
    Fake.flavour, status = args[0], int(args[1])
    Fake.not_ready = 3
    rest = args[2:]
    for flag in ('--parallel', '-np'):
        if flag in rest:
            Fake.slots = int(rest[rest.index(flag) + 1])
    port = int(rest[rest.index('--port') + 1])
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', port), Fake)
    srv.daemon_threads = True
    if '--port-file' in rest:
        with open(rest[rest.index('--port-file') + 1], 'w') as f:
            f.write(str(srv.server_address[1]))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(status))
    print('fake server up', flush=True)
    srv.serve_forever()


def test_started_servers(sb):
    """--worker and --llama-server with fake servers: the flags added, readiness, exit status."""
    me = f'{sys.executable} {os.path.abspath(__file__)} fake-server'
    rc, rep, out, err = run_main(sb, ['--worker', f'{me} rbee 0', '--llama-server', f'{me} llama 0 -np 5', '--compare',
                                      '--clients', '3', '--requests', '4', '--prompt-len', '9', '--output-len', '6'])
    check('started fakes: exit 0', rc == 0, (rc, err))
    if rep:
        a, b = rep['targets']
        # ctx: 9 * 1.1 + 64 + 6 = 79 tokens, rounded up to 256; llama-server: its 5 slots x 256
        check('worker flags added', a['argv'][5:] == ['--local-mode', '--port', '0', '--port-file', a['argv'][9],
                                                     '--parallel', '3', '--ctx-size', '256']
              and a['server']['total_slots'] == 3, a['argv'])
        check('llama-server flags added, its -np kept', b['argv'][5:] == ['-np', '5', '--host', '127.0.0.1', '--port',
                                                                          b['argv'][10], '--metrics', '-c', '1280']
              and b['server']['total_slots'] == 5, b['argv'])
        check('ready only when the server said so (no request answered 503)',
              not a['summary']['errors'] and not b['summary']['errors'],
              (a['summary']['errors'], b['summary']['errors']))
        check('llama-server counters read', b['counters'].get('generated') == b['summary']['output_tokens'] and
              b['counters'].get('generated_name') == 'llamacpp:tokens_predicted_total', b['counters'])
    rc, rep, out, err = run_main(sb, ['--worker', f'{me} rbee 7', '--requests', '2', '--prompt-len', '4',
                                      '--output-len', '2'])
    check('a server that exits 7 when stopped: exit 1, said', rc == 1 and 'exited with status 7' in err and rep and
          rep['targets'][0]['server_exit'] == 7, (rc, err))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == 'fake-server':
        fake_server(sys.argv[2:])
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == 'units':
        sb = load(sys.argv[2])
        test_percentile(sb)
        test_parse_range(sb)
        test_sse(sb)
        test_fit(sb)
        srv, url = start_fake()
        try:
            test_timing(sb, url)
            test_errors(sb, url)
            test_main_fake(sb, url)
        finally:
            srv.shutdown()
        test_started_servers(sb)
    elif len(sys.argv) == 5 and sys.argv[1] == 'worker':
        test_worker(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(f'{PASSES[0]} checks passed, {len(FAILS)} failed')
    return 1 if FAILS else 0


if __name__ == '__main__':
    sys.exit(main())
