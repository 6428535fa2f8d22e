// Chunked prefill (--prefill-chunk, issue 31 item 5) against the real
// llm-worker-rbee on its bundled Q8_0 model on the CPU (deterministic
// batching on, the default there):
// - a long prompt (~450 tokens, pieces of 32) sent while another request
//   streams: the streaming request keeps receiving tokens between the long
//   request's sending and its first token, and both answers (text and
//   logprobs, every printed digit) equal the same requests run alone on a
//   worker started with --prefill-chunk 0 (every prompt prefilled whole);
// - /props reports prefill_chunk (128 by default), a bad value is a
//   startup error.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { BIN, killAll, parseSse, request, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
if (!SRC) throw new Error('RBEE_SOURCE_DIR is not set');
const GGUF = `${SRC}/models/default/rbee-default-q8_0.gguf`;
const workers = [];
let chunked, whole;

before(async () => {
  const common = ['--local-mode', '--model', GGUF, '--parallel', '2', '--ctx-size', '512'];
  chunked = await startWorker([...common, '--prefill-chunk', '32']);
  whole = await startWorker([...common, '--prefill-chunk', '0']);
  workers.push(chunked, whole);
});
after(async () => {
  try { for (const w of workers) assert.equal((await w.stop()).code, 0); } finally { killAll(); }
});

// A deterministic text of n words.
function words(n, seed) {
  const v = ['And', 'God', 'said', 'unto', 'Moses', 'the', 'LORD', 'of', 'hosts', 'in', 'beginning', 'land',
    'Egypt', 'children', 'Israel', 'king', 'David', 'house', 'went', 'up', 'to', 'Jerusalem'];
  let s = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1103515245) + 12345) >>> 0; out.push(v[(s >>> 8) % v.length]); }
  return out.join(' ');
}

// A streamed completion; resolves {text, logprobs (JSON text), times (ms of each content chunk)}.
// onContent (optional) is called at the first content chunk.
function stream(w, prompt, maxTokens, onContent = () => {}) {
  const data = JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, logprobs: 3, stream: true });
  return new Promise((resolve, reject) => {
    const req = http.request(`${w.url}/v1/completions`, {
      method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) },
    }, (res) => {
      let body = '';
      const times = [];
      res.setEncoding('utf8');
      res.on('data', (c) => {
        body += c;
        for (let i = 0; i < (c.match(/"text":"[^"]/g) || []).length; i++) times.push(performance.now());
        if (times.length) onContent();
      });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`${res.statusCode}: ${body}`));
        const { events, done } = parseSse(body);
        assert.ok(done);
        let text = '';
        const lp = [];
        for (const e of events) {
          const c = e.choices?.[0];
          if (!c) continue;
          text += c.text;
          if (c.logprobs) lp.push(c.logprobs);
        }
        resolve({ text, logprobs: JSON.stringify(lp), times });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}

test('a long prompt runs in pieces beside a stream: the stream goes on, both answers equal whole prefills', async () => {
  const long = words(400, 3), short = 'In the beginning';
  const n = JSON.parse((await request(chunked, 'POST', '/tokenize', { content: long, add_special: true })).body).tokens.length;
  assert.ok(n > 300 && n < 480, `${n} tokens`);
  const runAlone = await stream(whole, short, 160), longAlone = await stream(whole, long, 16);
  let underway;
  const started = new Promise((r) => { underway = r; });
  const run = stream(chunked, short, 160, () => underway());
  await started; // the stream is decoding
  const sent = performance.now();
  const longGot = await stream(chunked, long, 16);
  const runGot = await run;
  const between = runGot.times.filter((t) => t > sent && t < longGot.times[0]).length;
  console.log(`# ${n}-token prompt in pieces of 32: ${between} tokens of the running stream before its first token`);
  assert.ok(between >= 3, `${between} tokens of the stream during the prefill`);
  assert.equal(longGot.text, longAlone.text);
  assert.equal(longGot.logprobs, longAlone.logprobs);
  assert.equal(runGot.text, runAlone.text);
  assert.equal(runGot.logprobs, runAlone.logprobs);
});

test('/props reports prefill_chunk; a bad value is refused at startup', async () => {
  assert.equal(JSON.parse((await request(chunked, 'GET', '/props')).body).prefill_chunk, 32);
  assert.equal(JSON.parse((await request(whole, 'GET', '/props')).body).prefill_chunk, 0);
  const dflt = await startWorker(['--local-mode', '--model', GGUF]);
  workers.push(dflt);
  assert.equal(JSON.parse((await request(dflt, 'GET', '/props')).body).prefill_chunk, 128);
  const r = spawnSync(BIN, ['--local-mode', '--model', GGUF, '--port', '0', '--prefill-chunk', '300'],
    { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 2, r.stderr); // a command-line error
  assert.match(r.stderr, /--prefill-chunk expects an integer in \[0, 256\]/);
});
