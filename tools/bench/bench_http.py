"""What the worker benchmarks of this folder share (standard library only): a free local port to start a worker
on, and JSON requests to it (POST with a JSON body and a JSON answer; GET of a text answer). An HTTP error
status of a POST raises RuntimeError with the server's message (in a thread too, where SystemExit would pass
silently)."""
import json
import socket
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
