"""What the worker benchmarks of this folder share (standard library only): a worker started in local mode on a
free port (ready when its /v1/ready says so) and stopped, and JSON requests to it (POST with a JSON body and a
JSON answer; GET of a text answer). An HTTP error
status of a POST raises RuntimeError with the server's message (in a thread too, where SystemExit would pass
silently)."""
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=600):
    req = urllib.request.Request(f'http://127.0.0.1:{port}{path}', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f'POST {path}: HTTP {e.code}: {e.read().decode(errors="replace")}') from None


def get(port, path, timeout=30):
    with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=timeout) as r:
        return r.read().decode()


def start_worker(args):
    """The worker program args[0] with args[1:] in local mode on a free port, once it is ready: (process,
    port). SystemExit with the end of its stderr if it exits or is not ready within a minute."""
    port = free_port()
    w = subprocess.Popen([args[0], '--local-mode', '--port', str(port)] + list(args[1:]), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    for _ in range(600):
        if w.poll() is not None:
            raise SystemExit(f'worker exited with {w.returncode}: {w.stderr.read().decode()[-2000:]}')
        try:
            if json.loads(get(port, '/v1/ready')).get('ready'):
                return w, port
        except OSError:
            pass
        time.sleep(0.1)
    stop_worker(w)
    raise SystemExit('the worker was not ready within a minute')


def stop_worker(w):
    w.terminate()
    try:
        w.wait(timeout=30)
    except subprocess.TimeoutExpired:
        w.kill()
