#!/usr/bin/env python3
"""The install as a user gets it: `cmake --install` of this build into a
temporary DESTDIR under a prefix other than the configured one, then, from
the installed tree only:
  - the layout (programs and their -cpu/-cuda/-rocm links, shipped models,
    headers, librbee.a, rbee.pc, man pages, completion, systemd example);
  - `rbee --help`;
  - the GPU backends as modules: `rbee devices` looks for them in the
    installed <libdir>/rbee (relative to the program, so the tree can move)
    and loads one placed there (the stand-in module of tests/ops when this
    build made no CUDA module), listing its device;
  - the installed worker started without --model serves the installed
    default model (its GGUF is the file mapped in the process), answers
    /health, and greedy-completes "And God said" with a prefix of the text
    transformers generated when the model was made (models/default/
    reference.json), then drains and exits 0 on SIGTERM;
  - every man page renders with `man -l` without a warning and names every
    flag its program's --help lists;
  - each public header compiles on its own, and a program built with only
    `pkg-config --cflags --libs rbee` and placed in the installed bin/ finds
    the installed model and encodes the reference prompt to transformers' ids;
  - the bash completion completes commands and a command's options;
  - the example systemd unit passes `systemd-analyze verify`.
A tool this needs that is absent (help2man, man, pkg-config,
systemd-analyze) skips that part with "skipped: <what>" (exit 77) unless CI
is true, where it fails."""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
PREFIX = '/opt/rbee-install-test'
missing = []


def under_ci():
    return os.environ.get('CI', '') in ('true', '1')


def need(ok, what):
    if not ok:
        missing.append(what)
    return ok


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f'{cmd} exited {r.returncode}:\n{r.stdout}\n{r.stderr}')
    return r


def http(url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={'Content-Type': 'application/json'} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def clean_env():
    # RBEE_<FLAG> variables act as flags: none may leak in from the caller
    env = {k: v for k, v in os.environ.items() if not k.startswith(('RBEE_', 'LLORCH_'))}
    env['LC_ALL'] = 'C.UTF-8'
    return env


def check_layout(root, args):
    b = os.path.join(root, 'bin')
    names = ['rbee'] + args.workers
    for n in names:
        assert os.access(os.path.join(b, n), os.X_OK), f'bin/{n} missing'
    for w in args.workers:
        for alias in ('cpu', 'cuda', 'rocm'):
            link = os.path.join(b, f'{w}-{alias}')
            assert os.path.islink(link) and os.readlink(link) == w, f'{link} is not a link to {w}'
    for rel in ('share/rbee/models/default/rbee-default-q8_0.gguf', 'share/rbee/models/default/MODEL_CARD.md',
                'share/rbee/models/clip/bpe_simple_vocab_16e6.txt.gz', 'share/rbee/models/clip/LICENSE',
                'share/bash-completion/completions/rbee',
                'share/doc/rbee/examples/systemd/llm-worker-rbee.service'):
        assert os.path.isfile(os.path.join(root, rel)), f'{rel} missing'
    src_headers = sorted(os.listdir(os.path.join(args.source, 'include/rbee')))
    assert sorted(os.listdir(os.path.join(root, 'include/rbee'))) == src_headers, 'installed headers differ'
    libdir = os.path.join(root, args.libdir)
    assert os.path.isfile(os.path.join(libdir, 'librbee.a')), 'librbee.a missing'
    assert os.path.isfile(os.path.join(libdir, 'pkgconfig/rbee.pc')), 'rbee.pc missing'
    with open(os.path.join(args.source, 'models/default/rbee-default-q8_0.gguf'), 'rb') as f, \
            open(os.path.join(root, 'share/rbee/models/default/rbee-default-q8_0.gguf'), 'rb') as g:
        assert f.read() == g.read(), 'the installed model differs from models/default'


def check_default_sd(root, tmp):
    """The installed default SD model (the build's GGUF of models/default-sd) is what `rbee txt2img` draws
    with when given no model."""
    gguf = os.path.join(root, 'share/rbee/models/default-sd/rbee-default-sd-f16.gguf')
    assert os.path.isfile(gguf), 'share/rbee/models/default-sd/rbee-default-sd-f16.gguf missing'
    assert os.path.isfile(os.path.join(root, 'share/rbee/models/default-sd/MODEL_CARD.md')), 'SD model card missing'
    out = os.path.join(tmp, 'sd.png')
    r = run([os.path.join(root, 'bin/rbee'), 'txt2img', '-p', 'a red circle on a blue background', '--steps', '2',
             '--seed', '1', '--threads', '2', '-o', out], env=clean_env())
    assert r.stdout.strip() == out, r.stdout
    assert os.path.getsize(out) > 0
    assert 'rbee-default-sd-f16: sd1 (gguf)' in r.stderr, r.stderr[:400]


def check_rbee_help(root):
    r = run([os.path.join(root, 'bin/rbee'), '--help'], env=clean_env())
    assert r.stdout.startswith('Usage: rbee <command>'), r.stdout[:200]
    assert '  generate ' in r.stdout and '  txt2img ' in r.stdout, r.stdout


def check_modules(root, args):
    moddir = os.path.join(root, args.libdir, 'rbee')
    rbee = os.path.join(root, 'bin/rbee')
    out = run([rbee, 'devices'], env=clean_env()).stdout
    built = out.splitlines()[0].split(': ', 1)[1].split(',')
    for kind in ('cuda', 'rocm'):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(kind + ' '))
        if kind in built:
            assert os.path.isfile(os.path.join(moddir, f'librbee-{kind}.so')), f'librbee-{kind}.so not installed'
        else:
            assert f'no librbee-{kind}.so in {os.path.join(root, "bin")}/' in line, line
    fake = os.path.join(args.build, 'tests/ops/fake_modules/good/librbee-cuda.so')
    if 'cuda' in built or not os.path.isfile(fake):
        return
    os.makedirs(moddir, exist_ok=True)
    shutil.copy(fake, os.path.join(moddir, 'librbee-cuda.so'))
    out = run([rbee, 'devices'], env=clean_env()).stdout
    line = next(ln for ln in out.splitlines() if ln.strip().startswith('cuda '))
    path = line.split(None, 1)[1]
    assert os.path.samefile(path, os.path.join(moddir, 'librbee-cuda.so')), out
    assert 'fake device' in out, out
    os.remove(os.path.join(moddir, 'librbee-cuda.so'))


def check_worker(root, ref, tmp):
    """The installed LLM worker on its installed default model."""
    port_file = os.path.join(tmp, 'port')
    exe = os.path.join(root, 'bin/llm-worker-rbee-cpu')
    log = open(os.path.join(tmp, 'worker.log'), 'w+')
    p = subprocess.Popen([exe, '--local-mode', '--port', '0', '--port-file', port_file, '--threads', '2'],
                         env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        port = 0
        deadline = time.time() + 120
        while not port and time.time() < deadline:
            assert p.poll() is None, f'worker exited early: {open(log.name).read()}'
            try:
                port = int(open(port_file).read() or 0)
            except (FileNotFoundError, ValueError):
                time.sleep(0.05)
        assert port, 'worker never wrote its port'
        url = f'http://127.0.0.1:{port}'
        assert http(url + '/health')[0] == 200
        while time.time() < deadline:
            st, body = http(url + '/v1/ready')
            if st == 200 and json.loads(body).get('ready'):
                break
            time.sleep(0.05)
        else:
            raise AssertionError('worker never became ready:\n' + open(log.name).read())
        # the process maps the installed GGUF, not the source tree's
        gguf = os.path.realpath(os.path.join(root, 'share/rbee/models/default/rbee-default-q8_0.gguf'))
        maps = open(f'/proc/{p.pid}/maps').read()
        assert gguf in maps, f'{gguf} is not mapped by the worker'
        assert 'models/default/rbee-default-q8_0.gguf' not in maps.replace(gguf, ''), 'another copy is mapped'
        st, body = http(url + '/v1/completions', {'prompt': ref['prompt'], 'max_tokens': 16, 'temperature': 0})
        assert st == 200, body
        out = json.loads(body)
        text = out['choices'][0]['text']
        assert out['usage']['completion_tokens'] == 16, body
        assert len(text) > 16 and ref['new_text'].startswith(text), \
            f'completion {text!r} is not a prefix of the reference {ref["new_text"]!r}'
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = 'killed after 60 s'
    assert rc == 0, f'worker exit status {rc} after SIGTERM:\n' + open(log.name).read()


def check_man(root, args):
    pages = ['rbee'] + args.workers
    if not need(args.help2man, 'help2man (the man pages were not built)'):
        return
    if not need(shutil.which('man'), 'man (man-db)'):
        return
    for name in pages:
        page = os.path.join(root, 'share/man/man1', f'{name}.1')
        assert os.path.isfile(page), f'{page} missing'
        env = clean_env()
        env['MANWIDTH'] = '100'
        r = subprocess.run(['man', '--warnings=all', '-l', page], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and r.stderr == '', f'man -l {name}.1: rc {r.returncode}\n{r.stderr}'
        assert re.search(rf'^NAME\n\s+{re.escape(name)}\s+-\s+\S', r.stdout, re.M), r.stdout[:300]
        roff = open(page).read().replace('\\-', '-')
        helptext = run([os.path.join(root, 'bin', name), '--help'], env=clean_env()).stdout
        flags = set(re.findall(r'(?<![\w-])--[a-z0-9][a-z0-9-]*', helptext))
        assert flags or name == 'rbee', f'no flags in {name} --help'
        for fl in flags:
            assert fl in roff, f'{name}.1 lacks {fl}'
        if name == 'rbee':
            for cmd in re.findall(r'^  ([a-z0-9-]+) ', helptext, re.M):
                assert re.search(rf'^{re.escape(cmd)}\b', roff, re.M), f'rbee.1 lacks the {cmd} command'


def check_library(root, args, ref, tmp):
    inc = os.path.join(root, 'include')
    warn = ['-std=c11', '-Wall', '-Wextra', '-Werror', '-Wstrict-prototypes']
    for h in sorted(os.listdir(os.path.join(inc, 'rbee'))):
        run([args.cc, *warn, '-fsyntax-only', '-I', inc, '-x', 'c', '-'],
            input=f'#include <rbee/{h}>\nint main(void) {{ return 0; }}\n')
    if not need(shutil.which('pkg-config'), 'pkg-config'):
        return
    env = clean_env()
    env['PKG_CONFIG_PATH'] = os.path.join(root, args.libdir, 'pkgconfig')
    pc = run(['pkg-config', '--cflags', '--libs', 'rbee'], env=env).stdout.split()
    assert any(os.path.realpath(x[2:]) == os.path.realpath(inc) for x in pc if x.startswith('-I')), pc
    exe = os.path.join(root, 'bin/rbee-pc-client')
    run([args.cc, *warn, *args.extra_flags.split(), os.path.join(args.source, 'tests/install/pc_client.c'),
         '-o', exe, *pc])
    out = json.loads(run([exe], env=clean_env()).stdout)
    os.remove(exe)
    want = os.path.realpath(os.path.join(root, 'share/rbee/models/default/rbee-default-q8_0.gguf'))
    assert os.path.realpath(out['path']) == want, f'the library found {out["path"]}, not {want}'
    assert out['arch'] == 'llama', out
    assert out['ids'] == ref['prompt_ids'], f'ids {out["ids"]} != transformers {ref["prompt_ids"]}'


def check_completion(root):
    comp = os.path.join(root, 'share/bash-completion/completions/rbee')
    rbee = os.path.join(root, 'bin/rbee')

    def complete(*words):
        script = (f'source "{comp}"; COMP_WORDS=("{rbee}" {" ".join(words)}); '
                  f'COMP_CWORD={len(words)}; _rbee; printf "%s\\n" "${{COMPREPLY[@]}}"')
        return run(['bash', '-c', script], env=clean_env()).stdout.split()

    assert complete('ge') == ['generate'], complete('ge')
    assert set(complete('''""''')) >= {'generate', 'txt2img', 'devices', 'convert', '--help'}
    assert '--max-tokens' in complete('generate', '--max'), complete('generate', '--max')
    assert complete('generate', '--zzz') == []
    # the registration line names the function for rbee
    r = run(['bash', '-c', f'source "{comp}"; complete -p rbee'], env=clean_env())
    assert '-F _rbee' in r.stdout, r.stdout


def check_systemd(root, tmp):
    if not need(shutil.which('systemd-analyze'), 'systemd-analyze (systemd)'):
        return
    unit = open(os.path.join(root, 'share/doc/rbee/examples/systemd/llm-worker-rbee.service')).read()
    assert '--log-format json' in unit and 'KillSignal=SIGTERM' in unit
    # the installed binary instead of the /usr/local one; no environment file here
    unit = unit.replace('/usr/local/bin/llm-worker-rbee', os.path.join(root, 'bin/llm-worker-rbee'))
    unit = re.sub(r'^EnvironmentFile=.*\n', '', unit, flags=re.M)
    path = os.path.join(tmp, 'llm-worker-rbee.service')
    open(path, 'w').write(unit)
    r = subprocess.run(['systemd-analyze', 'verify', '--man=no', path], capture_output=True, text=True,
                       env=clean_env())
    ours = [ln for ln in (r.stdout + r.stderr).splitlines() if 'llm-worker-rbee' in ln]
    assert r.returncode == 0 and not ours, f'systemd-analyze verify: rc {r.returncode}\n{r.stdout}{r.stderr}'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', required=True)
    ap.add_argument('--source', required=True)
    ap.add_argument('--cc', required=True)
    ap.add_argument('--extra-flags', default='', help='compiler flags the build used (sanitizers)')
    ap.add_argument('--libdir', required=True, help='CMAKE_INSTALL_LIBDIR')
    ap.add_argument('--workers', default='', help='worker programs this build makes, ;-separated')
    ap.add_argument('--help2man', default='')
    args = ap.parse_args()
    args.workers = [w for w in args.workers.split(';') if w]
    args.help2man = bool(args.help2man) and not args.help2man.endswith('NOTFOUND')
    ref = json.load(open(os.path.join(args.source, 'models/default/reference.json')))['greedy']['results'][0]
    assert ref['prompt'] == 'And God said'

    tmp = tempfile.mkdtemp(prefix='rbee-install-')
    try:
        env = clean_env()
        env['DESTDIR'] = os.path.join(tmp, 'dest')
        run(['cmake', '--install', args.build, '--prefix', PREFIX], env=env)
        root = os.path.join(tmp, 'dest') + PREFIX
        for step in (lambda: check_layout(root, args), lambda: check_rbee_help(root), lambda: check_default_sd(root, tmp),
                     lambda: check_modules(root, args),
                     lambda: check_worker(root, ref, tmp), lambda: check_man(root, args),
                     lambda: check_library(root, args, ref, tmp), lambda: check_completion(root),
                     lambda: check_systemd(root, tmp)):
            step()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if missing:
        if under_ci():
            print('missing under CI (CI=true requires every part): ' + '; '.join(missing))
            return 1
        print('skipped: ' + '; '.join(missing))
        return SKIP
    print('install test: all parts passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
