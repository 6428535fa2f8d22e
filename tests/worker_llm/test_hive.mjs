// A fake hive (node:http) records what llm-worker-rbee sends it: the ready
// callback, periodic heartbeats with the documented body, "busy" while a
// request runs, heartbeats resuming after the hive was down (while the
// worker keeps serving), and the final "stopping" heartbeat on SIGTERM.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, test } from 'node:test';
import { killAll, request, sleep, startWorker } from './worker_harness.mjs';

after(killAll);
const hives = []; // closed at the end even when a test fails, so node can exit
after(() => Promise.all(hives.map(closeHive)));

function fakeHive(port = 0) {
  const hive = { heartbeats: [], callbacks: [], sockets: new Set() };
  hives.push(hive);
  hive.server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const rec = { at: Date.now(), path: req.url, body: JSON.parse(body), ctype: req.headers['content-type'] };
      if (req.url === '/v1/worker-heartbeat') hive.heartbeats.push(rec);
      else if (req.url === '/callback') hive.callbacks.push(rec);
      res.writeHead(req.url === '/v1/worker-heartbeat' || req.url === '/callback' ? 200 : 404, { 'Content-Type': 'application/json' });
      res.end('{}');
    });
  });
  hive.server.on('connection', (s) => { hive.sockets.add(s); s.on('close', () => hive.sockets.delete(s)); });
  return new Promise((resolve) => hive.server.listen(port, '127.0.0.1', () => { hive.port = hive.server.address().port; resolve(hive); }));
}

function closeHive(hive) {
  for (const s of hive.sockets) s.destroy();
  return new Promise((resolve) => hive.server.close(() => resolve()));
}

async function until(what, cond, ms = 15000) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

test('heartbeats, ready callback, hive outage and final stopping heartbeat', async () => {
  const hive = await fakeHive();
  const hp = hive.port;
  const w = await startWorker(['--local-mode', '--worker-id', 'w-hive-test', '--model-ref', 'hf:rbee/default',
    '--hive-url', `http://127.0.0.1:${hp}/`, '--callback-url', `http://127.0.0.1:${hp}/callback`, '--heartbeat-interval-ms', '200']);

  await until('ready callback', () => hive.callbacks.length >= 1);
  const cb = hive.callbacks[0].body;
  assert.equal(cb.worker_id, 'w-hive-test');
  assert.equal(cb.status, 'ready');
  assert.equal(cb.port, w.port);
  assert.equal(cb.model_ref, 'hf:rbee/default');

  await until('two ready heartbeats', () => hive.heartbeats.filter((h) => h.body.worker.status === 'ready').length >= 2);
  const hb = hive.heartbeats.find((h) => h.body.worker.status === 'ready');
  assert.equal(hb.ctype, 'application/json');
  assert.deepEqual(Object.keys(hb.body).sort(), ['timestamp', 'worker']);
  assert.equal(hb.body.worker.id, 'w-hive-test');
  assert.equal(hb.body.worker.model_id, 'hf:rbee/default');
  assert.equal(hb.body.worker.device, 'cpu:0');
  assert.equal(hb.body.worker.port, w.port);
  assert.equal(hb.body.worker.implementation, 'llm-worker-rbee');
  assert.match(hb.body.worker.version, /^\d+\.\d+\.\d+/);
  assert.match(hb.body.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  assert.ok(Math.abs(Date.parse(hb.body.timestamp) - hb.at) < 5000);
  // interval: consecutive heartbeats roughly 200 ms apart (generous bounds for a loaded CI machine)
  const n0 = hive.heartbeats.length;
  await sleep(1200);
  const per = hive.heartbeats.length - n0;
  assert.ok(per >= 2 && per <= 12, `heartbeats in 1.2 s: ${per}`);

  // busy while requests run: one 300-token completion can end inside one 200 ms
  // interval on a fast machine, so requests follow each other until a heartbeat lands
  let sawBusy = false;
  const load = (async () => {
    const t0 = Date.now();
    while (!sawBusy && Date.now() - t0 < 15000) {
      const r = await request(w, 'POST', '/v1/completions', { prompt: 'And God said', max_tokens: 300, temperature: 0 });
      assert.equal(r.status, 200);
    }
  })();
  try {
    await until('a busy heartbeat', () => hive.heartbeats.some((h) => h.body.worker.status === 'busy'));
  } finally {
    sawBusy = true;
    await load;
  }

  // hive down: the worker keeps serving
  await closeHive(hive);
  const downAt = Date.now();
  const r = await request(w, 'POST', '/v1/completions', { prompt: 'In the beginning', max_tokens: 5, temperature: 0 });
  assert.equal(r.status, 200);
  assert.equal((await request(w, 'GET', '/health')).status, 200);
  await sleep(1500);
  // hive back on the same port: heartbeats resume (backoff is capped at 4 intervals)
  const hive2 = await fakeHive(hp);
  await until('heartbeats after the hive came back', () => hive2.heartbeats.length >= 2, 10000);
  assert.ok(hive2.heartbeats[0].at - downAt >= 1500);
  assert.equal(hive2.heartbeats[0].body.worker.id, 'w-hive-test');
  assert.match(w.log(), /heartbeat to the hive failed/);

  // SIGTERM: final "stopping" heartbeat, exit 0
  const { code } = await w.stop('SIGTERM');
  assert.equal(code, 0);
  const last = hive2.heartbeats[hive2.heartbeats.length - 1];
  assert.equal(last.body.worker.status, 'stopping');
  await closeHive(hive2);
});

test('an unreachable hive never blocks startup or serving', async () => {
  const hive = await fakeHive();
  const port = hive.port;
  await closeHive(hive); // nothing listens there now
  const t0 = Date.now();
  const w = await startWorker(['--local-mode', '--hive-url', `http://127.0.0.1:${port}`, '--heartbeat-interval-ms', '100']);
  assert.ok(Date.now() - t0 < 60000);
  const r = await request(w, 'POST', '/v1/completions', { prompt: 'And', max_tokens: 3, temperature: 0 });
  assert.equal(r.status, 200);
  const { code } = await w.stop('SIGTERM');
  assert.equal(code, 0);
});
