// The OpenAI features applications rely on, through the official `openai`
// npm package against llm-worker-rbee, each against an independent reference.
// The bundled model runs from its float32 HF folder, where the CPU's decode
// step gives the same logits as a prefill (its Q8_0 GGUF does not: quantized
// activations round differently in a prefill's products than in a decode
// step's, by up to ~1e-2 in a logit; that file is checked on the prefill's
// token only):
// - logprobs (chat and the legacy completions shape, streaming and not): the
//   log-softmax of `rbee logits` (the same model, an f16 KV cache like the
//   worker's) at the same positions within 1e-4, greedy and sampled; the
//   top_logprobs are the k largest in order; bytes are the token's UTF-8;
// - n choices: indices 0..n-1, choice i equal to a lone request with seed + i,
//   greedy choices identical, streams reassembling to the same texts;
// - logit_bias: +100 forces a token, -100 on the greedy token moves the pick,
//   the logprobs stay the raw model's;
// - 16 stop strings, max_completion_tokens winning over max_tokens;
// - /tokenize and /detokenize (add_special and parse_special as separate
//   switches, with_pieces) against `rbee tokenize`, and /props;
// - /v1/embeddings (float and base64) on the HF model against a least-squares
//   recovery of the hidden state from `rbee logits` and the embedding matrix
//   read here from model.safetensors (the output head is W h): mean and last
//   pooling, unit length; 501 without --embedding;
// - bad input: 400s naming the field.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { killAll, request, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
const CLI = process.env.RBEE_CLI_BIN;
if (!SRC || !CLI) throw new Error('RBEE_SOURCE_DIR and RBEE_CLI_BIN must be set');
const GGUF = `${SRC}/models/default/rbee-default-q8_0.gguf`;
const HF = `${SRC}/models/default/hf`;
const TOKEN = `tok-${process.pid}-${Date.now()}`;
const ENV = { LLORCH_API_TOKEN: TOKEN };

let w, wMean, wLast, wQ, client, cMean, cLast, cQ;
const mk = (wk) => new OpenAI({ apiKey: TOKEN, baseURL: `${wk.url}/v1`, maxRetries: 0, timeout: 120000 });

before(async () => {
  [w, wMean, wLast, wQ] = await Promise.all([
    startWorker(['--local-mode', '--parallel', '4', '--model', HF], ENV),
    startWorker(['--local-mode', '--parallel', '2', '--model', HF, '--embedding'], ENV),
    startWorker(['--local-mode', '--parallel', '2', '--model', HF, '--embedding', '--pooling', 'last'], ENV),
    startWorker(['--local-mode', '--parallel', '1', '--model', GGUF], ENV),
  ]);
  client = mk(w);
  cMean = mk(wMean);
  cLast = mk(wLast);
  cQ = mk(wQ);
});
after(async () => {
  try {
    for (const x of [w, wMean, wLast, wQ]) assert.equal((await x.stop()).code, 0);
  } finally {
    killAll();
  }
});

// ---- references ----

// Raw logits of every position, as `rbee logits` writes them (f16 KV cache, as the worker's).
function logitsOf(model, ids) {
  const out = execFileSync(CLI, ['logits', '-m', model, '--kv-f16', '--tokens', ids.join(',')], { maxBuffer: 1 << 28 });
  const all = new Float32Array(out.buffer, out.byteOffset, out.byteLength / 4);
  const V = all.length / ids.length;
  assert.equal(V, Math.floor(V));
  return { V, row: (p) => all.subarray(p * V, (p + 1) * V) };
}

function logSoftmax(row) {
  let mx = -Infinity;
  for (const x of row) if (x > mx) mx = x;
  let s = 0;
  for (const x of row) s += Math.exp(x - mx);
  const lse = mx + Math.log(s);
  return Float64Array.from(row, (x) => x - lse);
}

// The k most likely ids, best first (ties by lower id).
function topK(ls, k) {
  return [...ls.keys()].sort((a, b) => ls[b] - ls[a] || a - b).slice(0, k);
}

async function post(wk, p, body) {
  const r = await request(wk, 'POST', p, body);
  return { status: r.status, body: JSON.parse(r.body) };
}

async function tokenize(wk, content, add_special, parse_special) {
  const r = await post(wk, '/tokenize', { content, add_special, parse_special });
  assert.equal(r.status, 200);
  return r.body.tokens;
}

function cli(args, input) {
  return execFileSync(CLI, args, { input }).toString();
}

// Checks chat-shaped entries against the reference logits at positions n0-1+i.
function checkEntries(entries, ref, n0, k, greedy) {
  let worst = 0;
  entries.forEach((e, i) => {
    const ls = logSoftmax(ref.row(n0 - 1 + i));
    worst = Math.max(worst, Math.abs(e.logprob - ls[e.id]));
    assert.ok(Math.abs(e.logprob - ls[e.id]) < 1e-4, `token ${i}: ${e.logprob} vs ${ls[e.id]}`);
    if (greedy) assert.equal(e.id, topK(ls, 1)[0]);
    assert.equal(e.top_logprobs.length, k);
    const want = topK(ls, k);
    e.top_logprobs.forEach((t, j) => {
      assert.equal(t.id, want[j], `token ${i}: top ${j}`);
      assert.ok(Math.abs(t.logprob - ls[t.id]) < 1e-4);
      assert.deepEqual(Buffer.from(t.bytes).toString('utf8'), t.token);
    });
    assert.equal(Buffer.from(e.bytes).toString('utf8'), e.token);
  });
  return worst;
}

// ---- logprobs ----

test('chat logprobs equal the log-softmax of rbee logits, greedy and sampled, streamed and not', async () => {
  const content = 'Who made the heaven and the earth?';
  const messages = [{ role: 'user', content }];
  const props = (await request(w, 'GET', '/props')).body;
  const { bos_token, chat_template } = JSON.parse(props);
  assert.match(chat_template, /assistant:/); // the bundled model has no template: the plain fallback
  const promptIds = await tokenize(w, `${bos_token}user: ${content}\nassistant:`, false, true);
  for (const extra of [{ temperature: 0 }, { temperature: 1.1, seed: 7, top_p: 0.9, frequency_penalty: 0.5 }]) {
    const req = { messages, max_tokens: 8, logprobs: true, top_logprobs: 4, ...extra };
    const full = await client.chat.completions.create(req);
    assert.equal(full.usage.prompt_tokens, promptIds.length);
    const entries = full.choices[0].logprobs.content;
    assert.equal(entries.length, full.usage.completion_tokens);
    // bytes are the tokens' UTF-8: together they are the text
    assert.equal(Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString('utf8'), full.choices[0].message.content);
    const ref = logitsOf(HF, [...promptIds, ...entries.map((e) => e.id)]);
    const worst = checkEntries(entries, ref, promptIds.length, 4, extra.temperature === 0);
    console.log(`chat ${extra.temperature ? 'sampled' : 'greedy'}: ${entries.length} tokens, worst |logprob - ref| ${worst.toExponential(2)}`);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const streamed = [];
    let text = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c?.logprobs?.content) streamed.push(...c.logprobs.content);
      if (c?.delta?.content) text += c.delta.content;
    }
    assert.deepEqual(streamed, entries);
    assert.equal(text, full.choices[0].message.content);
  }
});

test('completions: the legacy logprobs shape, text_offset from the prompt start, stream = full', async () => {
  const prompt = 'And God said';
  const req = { prompt, max_tokens: 6, temperature: 0, logprobs: 3 };
  const full = await client.completions.create(req);
  const lp = full.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.tokens.join(''), full.choices[0].text);
  let off = prompt.length;
  lp.tokens.forEach((t, i) => {
    assert.equal(lp.text_offset[i], off);
    off += [...t].length;
  });
  // ids: each token string is one token of the vocabulary here
  const promptIds = await tokenize(w, prompt, true, false);
  const ids = [];
  for (const t of lp.tokens) {
    const one = await tokenize(w, t, false, false);
    assert.equal(one.length, 1, `"${t}" is one token`);
    ids.push(one[0]);
  }
  const ref = logitsOf(HF, [...promptIds, ...ids]);
  ids.forEach((id, i) => {
    const ls = logSoftmax(ref.row(promptIds.length - 1 + i));
    assert.equal(id, topK(ls, 1)[0]); // greedy
    assert.ok(Math.abs(lp.token_logprobs[i] - ls[id]) < 1e-4);
    const want = topK(ls, 3).map((t) => ls[t]);
    const got = Object.values(lp.top_logprobs[i]).sort((a, b) => b - a);
    assert.equal(got.length, 3);
    got.forEach((v, j) => assert.ok(Math.abs(v - want[j]) < 1e-4));
    assert.ok(Math.abs(lp.top_logprobs[i][lp.tokens[i]] - ls[id]) < 1e-4);
  });
  const stream = await client.completions.create({ ...req, stream: true });
  const acc = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of stream) {
    const l = chunk.choices[0]?.logprobs;
    if (l) for (const k of Object.keys(acc)) acc[k].push(...l[k]);
  }
  assert.deepEqual(acc, lp);
});

test('the Q8_0 GGUF: the first token\'s logprobs (the prefill row) equal rbee logits of the same file', async () => {
  const prompt = 'And God said unto Moses';
  const r = await cQ.completions.create({ prompt, max_tokens: 1, temperature: 0, logprobs: 5 });
  const promptIds = await tokenize(wQ, prompt, true, false);
  const ls = logSoftmax(logitsOf(GGUF, promptIds).row(promptIds.length - 1));
  const want = topK(ls, 5).map((t) => ls[t]);
  const got = Object.values(r.choices[0].logprobs.top_logprobs[0]).sort((a, b) => b - a);
  got.forEach((v, j) => assert.ok(Math.abs(v - want[j]) < 1e-4, `${v} vs ${want[j]}`));
  assert.ok(Math.abs(r.choices[0].logprobs.token_logprobs[0] - want[0]) < 1e-4);
});

// ---- n ----

test('n choices: indices 0..n-1, choice i = a lone request with seed + i, greedy ones identical', async () => {
  const base = { prompt: 'And the LORD spake unto Moses', max_tokens: 12, temperature: 0.9, seed: 100 };
  const many = await client.completions.create({ ...base, n: 3 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2]);
  let sum = 0;
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...base, seed: 100 + i });
    assert.equal(many.choices[i].text, one.choices[0].text, `choice ${i}`);
    assert.equal(many.choices[i].finish_reason, one.choices[0].finish_reason);
    sum += one.usage.completion_tokens;
  }
  assert.equal(many.usage.completion_tokens, sum);
  assert.ok(new Set(many.choices.map((c) => c.text)).size > 1);
  // streamed: the same texts per index, each choice finished once
  const stream = await client.completions.create({ ...base, n: 3, stream: true });
  const texts = ['', '', ''];
  const finished = [0, 0, 0];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finished[c.index]++;
    }
  }
  assert.deepEqual(texts, many.choices.map((c) => c.text));
  assert.deepEqual(finished, [1, 1, 1]);
  // chat, greedy: identical choices, streamed alike
  const messages = [{ role: 'user', content: 'In the beginning' }];
  const g = await client.chat.completions.create({ messages, max_tokens: 10, temperature: 0, n: 3 });
  assert.deepEqual(g.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(new Set(g.choices.map((c) => c.message.content)).size, 1);
  const gs = await client.chat.completions.create({ messages, max_tokens: 10, temperature: 0, n: 2, stream: true });
  const ct = ['', ''];
  const roles = [null, null];
  for await (const chunk of gs) {
    for (const c of chunk.choices) {
      if (c.delta.role) roles[c.index] = c.delta.role;
      if (c.delta.content) ct[c.index] += c.delta.content;
    }
  }
  assert.deepEqual(roles, ['assistant', 'assistant']);
  assert.deepEqual(ct, [g.choices[0].message.content, g.choices[0].message.content]);
});

// ---- logit_bias ----

test('logit_bias: +100 forces a token, -100 moves the greedy pick, logprobs stay the raw model\'s', async () => {
  const [egypt] = await tokenize(w, ' Egypt', false, false);
  const forced = await client.completions.create({ prompt: 'And God said', max_tokens: 2, temperature: 0, logit_bias: { [egypt]: 100 } });
  assert.equal(forced.choices[0].text, ' Egypt Egypt');
  const plain = await client.completions.create({ prompt: 'And God said', max_tokens: 1, temperature: 0, logprobs: 5 });
  const first = plain.choices[0].logprobs.tokens[0];
  const [firstId] = await tokenize(w, first, false, false);
  const moved = await client.completions.create({ prompt: 'And God said', max_tokens: 1, temperature: 0, logprobs: 5, logit_bias: { [firstId]: -100 } });
  const tok = moved.choices[0].logprobs.tokens[0];
  assert.notEqual(tok, first);
  assert.deepEqual(moved.choices[0].logprobs.top_logprobs[0], plain.choices[0].logprobs.top_logprobs[0]);
  assert.equal(moved.choices[0].logprobs.token_logprobs[0], plain.choices[0].logprobs.top_logprobs[0][tok]); // the runner-up's raw value
});

// ---- stop and max_completion_tokens ----

test('16 stop strings work, max_completion_tokens wins over max_tokens', async () => {
  const full = await client.completions.create({ prompt: 'In the beginning', max_tokens: 30, temperature: 0 });
  const t = full.choices[0].text;
  const word = t.trim().split(/\s+/)[3];
  const stop = [...Array.from({ length: 15 }, (_, i) => `zq${i}x`), word];
  const cut = await client.completions.create({ prompt: 'In the beginning', max_tokens: 30, temperature: 0, stop });
  assert.equal(cut.choices[0].text, t.slice(0, t.indexOf(word)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
  const m = await client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 7, max_completion_tokens: 3, temperature: 0 });
  assert.equal(m.usage.completion_tokens, 3);
  assert.equal(m.choices[0].finish_reason, 'length');
});

// ---- bad input ----

test('bad input: 400s naming the field', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  const cases = [
    [() => client.chat.completions.create({ messages: msgs, logprobs: true, top_logprobs: 21 }), 'top_logprobs'],
    [() => client.chat.completions.create({ messages: msgs, top_logprobs: 2 }), 'top_logprobs'],
    [() => client.completions.create({ prompt: 'x', logprobs: 21 }), 'logprobs'],
    [() => client.chat.completions.create({ messages: msgs, logit_bias: { abc: 1 } }), 'logit_bias'],
    [() => client.chat.completions.create({ messages: msgs, logit_bias: { 5: 101 } }), 'logit_bias'],
    [() => client.chat.completions.create({ messages: msgs, logit_bias: { 4096: 1 } }), 'logit_bias'],
    [() => client.chat.completions.create({ messages: msgs, n: 0 }), 'n'],
    [() => client.completions.create({ prompt: 'x', n: 5 }), 'n'], // beyond --parallel 4
    [() => client.completions.create({ prompt: 'x', stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), 'stop'],
  ];
  for (const [call, field] of cases)
    await assert.rejects(call, (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === field, field);
  // the rbee job stream has no log probabilities
  const r = await post(w, '/v1/jobs', { prompt: 'x', logprobs: true });
  assert.equal(r.status, 400);
  assert.equal(r.body.errors[0].field, 'logprobs');
});

// ---- /tokenize, /detokenize, /props ----

test('tokenize and detokenize: the two switches as rbee tokenize gives them, pieces, round trips', async () => {
  const text = 'And God said <|end_of_text|> unto Moses';
  const ids = (args) => JSON.parse(cli(['tokenize', '-m', HF, ...args], text));
  const dflt = await tokenize(w, text, false, true); // llama-server's defaults: no BOS, special text matched
  assert.deepEqual(await tokenize(wQ, text, false, true), dflt); // the GGUF's tokenizer alike
  assert.deepEqual(dflt, ids(['--no-add-special']));
  assert.ok(dflt.includes(1)); // <|end_of_text|>
  assert.deepEqual(await tokenize(w, text, true, true), ids([]));
  assert.equal((await tokenize(w, text, true, true))[0], 0); // BOS
  const plain = await tokenize(w, text, true, false);
  assert.deepEqual(plain, ids(['--no-parse-special']));
  assert.ok(!plain.includes(1));
  assert.deepEqual(await tokenize(w, text, false, false), ids(['--no-special']));
  for (const t of [dflt, await tokenize(w, text, false, false)]) {
    const d = await post(w, '/detokenize', { tokens: t });
    assert.equal(d.status, 200);
    assert.equal(d.body.content, text);
  }
  const wp = await post(w, '/tokenize', { content: 'héllo wörld', with_pieces: true });
  assert.deepEqual(wp.body.tokens.map((t) => t.id), await tokenize(w, 'héllo wörld', false, true));
  const bytes = Buffer.concat(wp.body.tokens.map((t) => (typeof t.piece === 'string' ? Buffer.from(t.piece) : Buffer.from(t.piece))));
  assert.equal(bytes.toString('utf8'), 'héllo wörld');
  let bad = await post(w, '/tokenize', { content: 5 });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'content');
  bad = await post(w, '/detokenize', { tokens: [1, 99999] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'tokens');
});

test('props: default settings, slots, model path, chat template, build', async () => {
  const p = JSON.parse((await request(w, 'GET', '/props')).body);
  assert.equal(p.total_slots, 4);
  assert.equal(p.default_generation_settings.n_ctx, 512);
  assert.equal(p.default_generation_settings.params.temperature, 1);
  assert.ok(p.model_path.endsWith('models/default/hf'));
  assert.equal(p.bos_token, '<|begin_of_text|>');
  assert.equal(p.eos_token, '<|end_of_text|>');
  assert.match(p.build_info, /rbee/);
  assert.equal(p.embedding, false);
  assert.ok(p.chat_template.length > 0);
});

// ---- embeddings ----

// The embedding matrix from model.safetensors (tied: the output head).
function readW() {
  const buf = fs.readFileSync(`${HF}/model.safetensors`);
  const n = Number(buf.readBigUInt64LE(0));
  const hdr = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const t = hdr['lm_head.weight'] ?? hdr['model.embed_tokens.weight'];
  assert.equal(t.dtype, 'F32');
  const [V, E] = t.shape;
  const start = 8 + n + t.data_offsets[0];
  const W = new Float32Array(buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + start + V * E * 4));
  return { W, V, E };
}

// Solves W h = target in the least-squares sense (normal equations, Cholesky).
function recoverHidden({ W, V, E }, target) {
  const A = new Float64Array(E * E), b = new Float64Array(E);
  for (let v = 0; v < V; v++) {
    const r = W.subarray(v * E, (v + 1) * E);
    for (let i = 0; i < E; i++) {
      b[i] += r[i] * target[v];
      for (let j = 0; j <= i; j++) A[i * E + j] += r[i] * r[j];
    }
  }
  for (let i = 0; i < E; i++) {
    for (let j = 0; j <= i; j++) {
      let s = A[i * E + j];
      for (let k = 0; k < j; k++) s -= A[i * E + k] * A[j * E + k];
      A[i * E + j] = i === j ? Math.sqrt(s) : s / A[j * E + j];
    }
  }
  const y = new Float64Array(E), h = new Float64Array(E);
  for (let i = 0; i < E; i++) {
    let s = b[i];
    for (let k = 0; k < i; k++) s -= A[i * E + k] * y[k];
    y[i] = s / A[i * E + i];
  }
  for (let i = E - 1; i >= 0; i--) {
    let s = y[i];
    for (let k = i + 1; k < E; k++) s -= A[k * E + i] * h[k];
    h[i] = s / A[i * E + i];
  }
  const norm = Math.hypot(...h);
  return h.map((x) => x / norm);
}

test('embeddings: mean and last pooling equal the hidden state recovered from rbee logits, unit length', async () => {
  const texts = ['And God said, Let there be light: and there was light.', 'In the beginning'];
  const Wt = readW();
  const got = {};
  for (const [name, c, wk] of [['mean', cMean, wMean], ['last', cLast, wLast]]) {
    const res = await c.embeddings.create({ model: 'rbee-default', input: texts }); // the SDK asks for base64
    const flo = await c.embeddings.create({ model: 'rbee-default', input: texts, encoding_format: 'float' });
    assert.deepEqual(res.data.map((d) => d.index), [0, 1]);
    let tokens = 0;
    for (let i = 0; i < texts.length; i++) {
      const e = res.data[i].embedding;
      assert.equal(e.length, Wt.E);
      e.forEach((x, k) => assert.ok(Math.abs(x - flo.data[i].embedding[k]) < 1e-7));
      assert.ok(Math.abs(Math.hypot(...e) - 1) < 1e-5);
      const ids = await tokenize(wk, texts[i], true, false);
      tokens += ids.length;
      const ref = logitsOf(HF, ids);
      const target = new Float64Array(Wt.V);
      if (name === 'last') target.set(ref.row(ids.length - 1));
      else for (let p = 0; p < ids.length; p++) ref.row(p).forEach((x, v) => { target[v] += x / ids.length; });
      const h = recoverHidden(Wt, target);
      const worst = Math.max(...e.map((x, k) => Math.abs(x - h[k])));
      console.log(`${name} pooling, input ${i}: max |embedding - reference| ${worst.toExponential(2)}`);
      assert.ok(worst < 1e-4);
      // token ids as input give the same vector
      const byIds = await c.embeddings.create({ model: 'rbee-default', input: [ids], encoding_format: 'float' });
      byIds.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - flo.data[i].embedding[k]) < 1e-6));
    }
    assert.equal(res.usage.prompt_tokens, tokens);
    got[name] = res.data[0].embedding;
  }
  const cos = got.mean.reduce((s, x, k) => s + x * got.last[k], 0);
  assert.ok(cos < 0.999, `mean and last pooling differ (cos ${cos})`);
  await assert.rejects(cMean.embeddings.create({ model: 'x', input: '' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(cMean.embeddings.create({ model: 'x', input: 'x', dimensions: 8 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
  // a worker started without --embedding says so
  await assert.rejects(client.embeddings.create({ model: 'x', input: 'x' }), (e) => e.status === 501 && /--embedding/.test(e.message));
});
