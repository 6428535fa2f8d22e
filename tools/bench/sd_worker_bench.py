#!/usr/bin/env python3
"""Benchmark (not a test): images per minute of sd-worker-rbee through its HTTP APIs, beside the engine alone.

Starts the worker (local mode, a free port) on a model (default random:sd15, the random SD 1.5 weights
`rbee bench-sd --random sd15` times), makes one warm-up image, then N images of SIZE x SIZE with STEPS
Euler steps (CFG 7.5, batch 1) three ways:
  sequential  rbee jobs one after the other (POST /v1/jobs, read the SSE stream to its end)
  queued      the N jobs submitted at once (the generation thread never waits for a client)
  a1111       POST /sdapi/v1/txt2img one after the other (base64 JSON answers)
and reports images/minute from the client's wall clock, the worker's own time per image (the end
events' time_ms) and the engine alone: `rbee bench-sd --random PRESET` (same size, steps, weight and
activation dtypes) for random models, else `rbee txt2img` on the same model (its printed stage times,
loading excluded). The difference is the worker's overhead (HTTP, JSON, PNG encoding, base64, queue).
Standard library only (the GPU machine has no Node.js).

usage: sd_worker_bench.py SD_WORKER_BIN RBEE_BIN [--backend cpu|cuda|rocm] [--device N] [--model M]
                          [--size 512] [--steps 20] [--images 8] [--use-f16] [--json OUT.json]
"""
import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

from bench_http import free_port, post

PROMPT = 'a photograph of an astronaut riding a horse'
NEGATIVE = 'blurry'


def stream(port, job_id):
    """Reads a job's SSE stream to [DONE]; returns its events."""
    events = []
    with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/jobs/{job_id}/stream', timeout=3600) as r:
        for raw in r:
            line = raw.decode().rstrip('\n')
            if not line.startswith('data: '):
                continue
            if line == 'data: [DONE]':
                break
            events.append(json.loads(line[6:]))
    return events


def job_body(a, seed):
    return {'prompt': PROMPT, 'negative_prompt': NEGATIVE, 'width': a.size, 'height': a.size, 'steps': a.steps,
            'cfg_scale': 7.5, 'sampler': 'euler', 'seed': seed, 'preview_every': 0}


def run_job(port, a, seed):
    r = post(port, '/v1/jobs', job_body(a, seed))
    ev = stream(port, r['job_id'])
    end = ev[-1]
    if end.get('type') != 'end' or end.get('images') != 1:
        raise SystemExit(f'job failed: {end}')
    return end['time_ms']


def engine_alone(a):
    """Milliseconds per image of the engine without the worker."""
    if a.model.startswith('random:'):
        dt = 'f16' if a.use_f16 else 'f32'
        cmd = [a.rbee, 'bench-sd', '--random', a.model[7:], '--backend', spec(a), '-W', str(a.size), '-H', str(a.size),
               '--steps', str(a.steps), '--dtype', dt, '--act-dtype', dt, '--reps', '1', '--json']
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)['image_ms'], ' '.join(cmd)
    cmd = [a.rbee, 'txt2img', '-m', a.model, '-p', PROMPT, '-n', NEGATIVE, '-W', str(a.size), '-H', str(a.size),
           '--steps', str(a.steps), '--cfg', '7.5', '--sampler', 'euler', '--seed', '1', '--backend', spec(a),
           '-o', '/tmp/rbee-sd-bench.png', '-q']
    if a.use_f16:
        cmd += ['--dtype', 'f16', '--act-dtype', 'f16']
    best = None
    for _ in range(2):  # the first run pays for first-use allocations
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        m = re.search(r'text ([\d.]+) ms, denoise ([\d.]+) ms .*decode ([\d.]+) ms', out.stderr)
        t = sum(float(x) for x in m.groups())
        best = t if best is None else min(best, t)
    return best, ' '.join(cmd)


def spec(a):
    return 'cpu' if a.backend == 'cpu' else f'{a.backend}:{a.device}'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('worker')
    ap.add_argument('rbee')
    ap.add_argument('--backend', default='cpu')
    ap.add_argument('--device', type=int, default=0)
    ap.add_argument('--model', default='random:sd15')
    ap.add_argument('--size', type=int, default=512)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--images', type=int, default=8)
    ap.add_argument('--use-f16', action='store_true')
    ap.add_argument('--json', help='also write the results here')
    a = ap.parse_args()

    port = free_port()
    cmd = [a.worker, '--local-mode', '--port', str(port), '--model', a.model, '--backend', a.backend, '--device',
           str(a.device), '--queue-depth', str(a.images + 4), '--max-size', str(max(a.size, 64))]
    if a.use_f16:
        cmd.append('--use-f16')
    log = open('/tmp/rbee-sd-worker-bench.log', 'w')
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(6000):
            if proc.poll() is not None:
                log.flush()
                with open('/tmp/rbee-sd-worker-bench.log') as f:
                    tail = f.read()[-3000:]
                raise SystemExit(f'the worker exited ({proc.returncode}); its log ends:\n{tail}')
            try:
                with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/ready', timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        info = json.loads(urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/info').read())
        print(f"# worker: {info.get('model')} {info.get('architecture')} on {info.get('backend')} "
              f"({info.get('device_name')}), {a.size}x{a.size}, {a.steps} steps, {a.images} images")
        run_job(port, a, 0)  # warm-up at the benchmark's size

        t0 = time.monotonic()
        worker_ms = [run_job(port, a, i + 1) for i in range(a.images)]
        seq = time.monotonic() - t0

        t0 = time.monotonic()
        ids = [post(port, '/v1/jobs', job_body(a, 100 + i))['job_id'] for i in range(a.images)]
        outs = [None] * len(ids)

        def read(k):
            outs[k] = stream(port, ids[k])
        th = [threading.Thread(target=read, args=(k,)) for k in range(len(ids))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        queued = time.monotonic() - t0
        if any(o[-1].get('images') != 1 for o in outs):
            raise SystemExit('a queued job failed')

        t0 = time.monotonic()
        for i in range(a.images):
            r = post(port, '/sdapi/v1/txt2img', {'prompt': PROMPT, 'negative_prompt': NEGATIVE, 'width': a.size,
                                                  'height': a.size, 'steps': a.steps, 'cfg_scale': 7.5,
                                                  'sampler_name': 'Euler', 'seed': 200 + i,
                                                  'override_settings': {'show_progress_every_n_steps': -1}})
            if len(r['images']) != 1:
                raise SystemExit('an A1111 request failed')
        a1111 = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    engine_ms, engine_cmd = engine_alone(a)
    res = {
        'size': a.size, 'steps': a.steps, 'images': a.images, 'backend': spec(a), 'model': a.model,
        'dtype': 'f16' if a.use_f16 else 'f32',
        'sequential_images_per_min': 60 * a.images / seq,
        'queued_images_per_min': 60 * a.images / queued,
        'a1111_images_per_min': 60 * a.images / a1111,
        'worker_ms_per_image_median': sorted(worker_ms)[len(worker_ms) // 2],
        'engine_ms_per_image': engine_ms,
        'engine_images_per_min': 60000.0 / engine_ms,
        'engine_command': engine_cmd,
    }
    res['overhead_pct_queued'] = 100.0 * (res['engine_images_per_min'] / res['queued_images_per_min'] - 1.0)
    print(f"rbee jobs, sequential : {res['sequential_images_per_min']:8.2f} images/min")
    print(f"rbee jobs, queued     : {res['queued_images_per_min']:8.2f} images/min "
          f"(worker's own time per image {res['worker_ms_per_image_median']:.0f} ms)")
    print(f"A1111 txt2img         : {res['a1111_images_per_min']:8.2f} images/min")
    print(f"engine alone          : {res['engine_images_per_min']:8.2f} images/min ({engine_ms:.0f} ms per image: "
          f"{engine_cmd})")
    print(f"worker overhead (queued vs engine): {res['overhead_pct_queued']:+.1f} %")
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == '__main__':
    sys.exit(main())
