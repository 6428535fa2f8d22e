#!/usr/bin/env python3
"""Benchmark (not a test): aggregate decode tokens/s of llm-worker-rbee at --parallel 1, 4, 8, 16.

For each level: starts the worker (local mode, a free port), sends as many concurrent non-streaming
completions as there are slots (max_tokens each, EOS ignored, so every sequence runs the full length)
and reports the client-side aggregate rate (generated tokens over wall time, prefill included) and
the worker's own decode rate from /metrics. The same measurement as tests/server/bench_parallel.mjs,
for machines without Node.js (the lent GPU machine). Standard library only.

usage: worker_parallel.py WORKER_BIN [--backend cpu|cuda|rocm] [--device N] [--model PATH] [--max-tokens 128]
                          [--levels 1,4,8,16]
"""
import argparse
import threading
import time

from bench_http import get, post, start_worker, stop_worker

PROMPTS = ['And God said', 'In the beginning', 'And the LORD spake unto Moses', 'Blessed are the']


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + ' ') or line.startswith(name + '{'):
            return float(line.split()[-1])
    return float('nan')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('worker')
    ap.add_argument('--backend', default='cpu')
    ap.add_argument('--device', default='0')
    ap.add_argument('--model')
    ap.add_argument('--max-tokens', type=int, default=128)
    ap.add_argument('--levels', default='1,4,8,16')
    a = ap.parse_args()
    print('| parallel | sequences x tokens | wall s | client aggregate tok/s | worker decode tok/s |')
    print('| --- | --- | --- | --- | --- |')
    for p in [int(x) for x in a.levels.split(',')]:
        cmd = [a.worker, '--parallel', str(p), '--ctx-size', str(a.max_tokens + 32), '--backend', a.backend, '--device',
               a.device]
        if a.model:
            cmd += ['--model', a.model]
        w, port = start_worker(cmd)
        try:
            post(port, '/v1/completions', {'prompt': 'warm up', 'max_tokens': 8, 'temperature': 0})
            out = [None] * p

            def one(i):
                out[i] = post(port, '/v1/completions', {'prompt': PROMPTS[i % len(PROMPTS)],
                                                        'max_tokens': a.max_tokens, 'temperature': 0.8,
                                                        'seed': i, 'ignore_eos': True})
            ts = [threading.Thread(target=one, args=(i,)) for i in range(p)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            secs = time.perf_counter() - t0
            tokens = sum(r['usage']['completion_tokens'] for r in out)
            dec = metric(get(port, '/metrics'), 'llorch_decode_tokens_per_second')
            print(f'| {p} | {p} x {a.max_tokens} | {secs:.2f} | {tokens / secs:.1f} | {dec:.1f} |', flush=True)
        finally:
            stop_worker(w)


if __name__ == '__main__':
    main()
