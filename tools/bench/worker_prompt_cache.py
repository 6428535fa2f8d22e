#!/usr/bin/env python3
"""Benchmark (not a test): time to first token of a prompt sharing a long prefix with the one before.

Issue 31's goal: a second request that shares a 2,000-token prefix with the first starts its first
token in under 10% of the first one's time. Starts llm-worker-rbee (local mode, a free port,
--parallel 1, the context sized to fit); per repetition a fresh prefix P of about N tokens (so A
always starts cold), then A = P + X and B = P + Y, each a non-streaming completion of one token
timed by the client (the prefill and one sampled token). Prints the medians of A and B, their ratio
and B's cached tokens (usage.prompt_tokens_details.cached_tokens); --cache-prompt off gives the cold
baseline. The same measurement as tests/worker_llm/bench_prompt_cache.mjs, for machines without
Node.js (the lent GPU machine). Standard library only.

usage: worker_prompt_cache.py WORKER_BIN [--backend cpu|cuda|rocm] [--device N] [--model PATH]
                              [--prefix-tokens 2000] [--reps 5] [--cache-prompt on|off]
"""
import argparse
import statistics
import time

from bench_http import post, start_worker, stop_worker

WORDS = ['And', 'God', 'said', 'unto', 'Moses', 'the', 'LORD', 'of', 'hosts', 'in', 'beginning', 'land', 'Egypt',
         'children', 'Israel', 'king', 'David', 'house', 'went', 'up', 'to', 'Jerusalem']


def words(n, seed):
    s = seed & 0xffffffff
    out = []
    for _ in range(n):
        s = (s * 1103515245 + 12345) & 0xffffffff
        out.append(WORDS[(s >> 8) % len(WORDS)])
    return ' '.join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('worker')
    ap.add_argument('--backend', default='cpu')
    ap.add_argument('--device', default='0')
    ap.add_argument('--model')
    ap.add_argument('--prefix-tokens', type=int, default=2000)
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--cache-prompt', default='on')
    a = ap.parse_args()
    cmd = [a.worker, '--parallel', '1', '--ctx-size', str(a.prefix_tokens + 512), '--backend', a.backend, '--device',
           a.device, '--cache-prompt', a.cache_prompt]
    if a.model:
        cmd += ['--model', a.model]
    w, port = start_worker(cmd)
    try:
        def n_tokens(text):
            return len(post(port, '/tokenize', {'content': text, 'add_special': True})['tokens'])

        def once(prompt):
            t0 = time.perf_counter()
            r = post(port, '/v1/completions', {'prompt': prompt, 'max_tokens': 1, 'temperature': 0})
            return (time.perf_counter() - t0) * 1e3, r['usage']

        n = a.prefix_tokens  # words for about prefix_tokens tokens
        for _ in range(4):
            n = max(1, round(n * a.prefix_tokens / n_tokens(words(n, 1))))
        once(words(64, 999))  # warm-up
        ta, tb, usage = [], [], None
        for r in range(a.reps):
            p = words(n, 100 + r)
            ta.append(once(f'{p} {words(20, 7000 + r)}')[0])
            ms, usage = once(f'{p} {words(20, 8000 + r)}')
            tb.append(ms)
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f'cache-prompt {a.cache_prompt}, {a.backend}:{a.device}')
        print('| prompt tokens (B) | cached (B) | TTFT A ms | TTFT B ms | B / A |')
        print('| --- | --- | --- | --- | --- |')
        print(f"| {usage['prompt_tokens']} | {usage['prompt_tokens_details']['cached_tokens']} | {ma:.1f} | {mb:.1f} "
              f'| {mb / ma:.3f} |', flush=True)
    finally:
        stop_worker(w)


if __name__ == '__main__':
    main()
