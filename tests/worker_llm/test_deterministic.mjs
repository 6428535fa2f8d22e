// Reproducible results under load (issue 35 item 9) against the real
// llm-worker-rbee on its bundled Q8_0 model, on the CPU, where
// --deterministic is on by default: a chat request's tokens and logprobs
// (every bit of them, as JSON numbers) are the same when it runs alone and
// when 2 to 8 copies of it and other requests share the batch, starting at
// different steps so the batch's make-up changes as they decode; greedy and
// seeded sampling alike. Also: /props reports the setting, --deterministic
// off is accepted and reported, and a bad value is a startup error.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { BIN, killAll, request, sleep, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
if (!SRC) throw new Error('RBEE_SOURCE_DIR is not set');
const GGUF = `${SRC}/models/default/rbee-default-q8_0.gguf`;
let w;

before(async () => { w = await startWorker(['--local-mode', '--model', GGUF, '--parallel', '8']); });
after(async () => {
  try { assert.equal((await w.stop()).code, 0); } finally { killAll(); }
});

const body = (text, extra = {}) => ({
  messages: [{ role: 'user', content: text }], max_tokens: 48, ignore_eos: true, temperature: 0,
  logprobs: true, top_logprobs: 2, ...extra,
});

async function chat(b) {
  const r = await request(w, 'POST', '/v1/chat/completions', b);
  assert.equal(r.status, 200, r.body);
  const c = JSON.parse(r.body).choices[0];
  // the raw JSON of the logprobs keeps every digit the worker printed
  return { text: c.message.content, logprobs: JSON.stringify(c.logprobs), n: c.logprobs.content.length };
}

test('/props reports deterministic batching on for the CPU', async () => {
  const r = await request(w, 'GET', '/props');
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).deterministic, true);
});

for (const [name, extra] of [['greedy', {}], ['seeded sampling', { temperature: 0.9, top_p: 0.95, seed: 1234 }]]) {
  test(`${name}: a request gives the same tokens and logprobs alone and in batches of 2 to 8`, async () => {
    const b = body('Once upon a time, in a small village by the sea,', extra);
    const solo = await chat(b);
    assert.equal(solo.n, 48);
    for (const copies of [2, 5, 8]) {
      const same = [], others = [];
      for (let i = 0; i < copies; i++) {
        // others with other prompts and lengths join and leave the batch
        if (i % 2) others.push(chat(body(`Request ${i}: write about the number ${i * 7}.`, { max_tokens: 5 + 9 * i })));
        same.push(chat(b));
        await sleep(15 * i); // later copies start at later steps of the earlier ones
      }
      await Promise.all(others);
      for (const g of await Promise.all(same)) {
        assert.equal(g.text, solo.text, `${copies} copies`);
        assert.equal(g.logprobs, solo.logprobs, `${copies} copies: logprobs`);
      }
    }
  });
}

test('--deterministic off is reported, a bad value refused at startup', async () => {
  const off = await startWorker(['--local-mode', '--model', GGUF, '--deterministic', 'off']);
  try {
    assert.equal(JSON.parse((await request(off, 'GET', '/props')).body).deterministic, false);
  } finally { await off.stop(); }
  const r = spawnSync(BIN, ['--local-mode', '--model', GGUF, '--port', '0', '--deterministic', 'maybe'],
    { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /--deterministic must be auto, on or off/);
});
