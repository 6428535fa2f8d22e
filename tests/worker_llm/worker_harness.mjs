// Shared by the Node integration tests: starts the real llm-worker-rbee on
// 127.0.0.1 with an OS-chosen port (read back from --port-file), waits for
// /v1/ready, and guarantees every started worker is killed when the test
// process exits. Also small HTTP and SSE helpers built on node:http only.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const started = new Set();
export function killAll() { for (const p of started) { try { p.kill('SIGKILL'); } catch { /* gone */ } } }
process.on('exit', killAll);

export const BIN = process.env.RBEE_WORKER_BIN;
if (!BIN) throw new Error('RBEE_WORKER_BIN is not set');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export { sleep };

export async function startWorker(args = [], env = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rbee-worker-'));
  const portFile = path.join(dir, 'port');
  const proc = spawn(BIN, ['--port', '0', '--port-file', portFile, ...args], {
    env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  started.add(proc);
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => { started.delete(proc); resolve({ code, signal }); }));
  let port = 0;
  for (let i = 0; i < 1200 && !port; i++) {
    if (proc.exitCode !== null) throw new Error(`worker exited early:\n${log}`);
    try { port = parseInt(fs.readFileSync(portFile, 'utf8'), 10) || 0; } catch { /* not yet */ }
    if (!port) await sleep(25);
  }
  if (!port) throw new Error(`worker never wrote its port:\n${log}`);
  const w = {
    proc, port, url: `http://127.0.0.1:${port}`, log: () => log, exited, dir,
    headers: env.LLORCH_API_TOKEN ? { Authorization: `Bearer ${env.LLORCH_API_TOKEN}` } : {},
    async stop(signal = 'SIGTERM') { proc.kill(signal); const r = await exited; fs.rmSync(dir, { recursive: true, force: true }); return r; },
  };
  for (let i = 0; i < 1200; i++) {
    const r = await request(w, 'GET', '/v1/ready').catch(() => null);
    if (r && r.status === 200 && JSON.parse(r.body).ready) return w;
    await sleep(25);
  }
  throw new Error(`worker never became ready:\n${log}`);
}

// One HTTP request; resolves {status, headers, body}.
export function request(w, method, p, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body));
    const req = http.request(`${w.url}${p}`, {
      method, agent: false,
      headers: { ...w.headers, ...headers, ...(data !== undefined ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}) },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(120000, () => req.destroy(new Error('timeout')));
    if (data !== undefined) req.write(data);
    req.end();
  });
}

// Parses a server-sent-event body into the JSON payloads; checks framing
// (comment blocks, the keep-alives a silent stream sends, are skipped).
// Returns {events, done} where done tells whether it ended with [DONE].
export function parseSse(body) {
  const blocks = body.split('\n\n');
  if (blocks[blocks.length - 1] !== '') throw new Error('stream does not end with a blank line');
  blocks.pop();
  const events = [];
  let done = false;
  for (const b of blocks) {
    if (b.startsWith(':') && !b.includes('\n')) continue;
    if (!b.startsWith('data: ') || b.includes('\n')) throw new Error(`malformed event: ${JSON.stringify(b)}`);
    const payload = b.slice(6);
    if (done) throw new Error('data after [DONE]');
    if (payload === '[DONE]') { done = true; continue; }
    events.push(JSON.parse(payload));
  }
  return { events, done };
}

export async function metrics(w) {
  const r = await request(w, 'GET', '/metrics');
  const out = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : -1;
}
