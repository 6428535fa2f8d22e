// The official `openai` npm package against llm-worker-rbee: completions and
// chat completions, streaming and not, usage (with prompt_tokens_details.
// cached_tokens) and finish_reason, stop
// strings, seeds, model listing, and errors surfacing as the SDK's typed
// errors (400 BadRequestError with param, also for unimplemented fields such
// as tools or echo; 401 AuthenticationError). The newer OpenAI features
// (logprobs, n, logit_bias, embeddings, ...) are in test_openai_features.mjs.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { killAll, startWorker } from './worker_harness.mjs';

const TOKEN = `tok-${process.pid}-${Date.now()}`;
let w;
let client;

before(async () => {
  w = await startWorker(['--local-mode', '--parallel', '4'], { LLORCH_API_TOKEN: TOKEN });
  client = new OpenAI({ apiKey: TOKEN, baseURL: `${w.url}/v1`, maxRetries: 0, timeout: 120000 });
});
after(async () => {
  try {
    const r = await w.stop();
    assert.equal(r.code, 0);
  } finally {
    killAll();
  }
});

test('models.list names the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['rbee-default']);
});

test('completions: non-streaming and streaming give the same greedy text', async () => {
  const full = await client.completions.create({ model: 'rbee-default', prompt: 'And God said', max_tokens: 14, temperature: 0 });
  assert.equal(full.object, 'text_completion');
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.ok(full.choices[0].text.length > 10);
  assert.equal(full.usage.completion_tokens, 14);
  assert.equal(full.usage.prompt_tokens, 4);
  assert.equal(full.usage.total_tokens, 18);
  const stream = await client.completions.create({ model: 'rbee-default', prompt: 'And God said', max_tokens: 14, temperature: 0, stream: true });
  let text = '';
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    assert.equal(chunk.id, chunks === 1 ? chunk.id : chunk.id);
  }
  assert.ok(chunks >= 2);
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, 'length');
});

test('completions: a stop string ends the text before it with finish_reason stop', async () => {
  const full = await client.completions.create({ prompt: 'In the beginning', max_tokens: 30, temperature: 0 });
  const t = full.choices[0].text;
  const words = t.trim().split(/\s+/);
  const stop = words[Math.floor(words.length / 2)];
  const cut = await client.completions.create({ prompt: 'In the beginning', max_tokens: 30, temperature: 0, stop: [stop] });
  assert.equal(cut.choices[0].text, t.slice(0, t.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('completions: the same seed gives the same sampled text', async () => {
  const p = { prompt: 'And the LORD', max_tokens: 20, temperature: 0.9, top_p: 0.95, seed: 1234 };
  const a = await client.completions.create(p);
  const b = await client.completions.create(p);
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('chat: non-streaming and streaming (with usage) agree', async () => {
  const messages = [{ role: 'system', content: 'Answer in the words of the KJV.' }, { role: 'user', content: 'Who made the heaven and the earth?' }];
  const full = await client.chat.completions.create({ model: 'rbee-default', messages, max_tokens: 12, temperature: 0 });
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.ok(full.choices[0].message.content.length > 0);
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.equal(full.usage.completion_tokens, 12);
  assert.ok(full.usage.prompt_tokens > 10);
  const stream = await client.chat.completions.create({ model: 'rbee-default', messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    const d = chunk.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, 'length');
  // the same prompt again: the stream took part of it from the cache the first request left
  const { prompt_tokens_details: cachedStream, ...countsStream } = usage;
  const { prompt_tokens_details: cachedFull, ...countsFull } = full.usage;
  assert.deepEqual(countsStream, countsFull);
  assert.ok(cachedStream.cached_tokens > cachedFull.cached_tokens, JSON.stringify([usage, full.usage]));
  assert.ok(cachedStream.cached_tokens < usage.prompt_tokens);
});

test('errors: 400 BadRequestError names the parameter', async () => {
  await assert.rejects(
    client.completions.create({ prompt: 'x', max_tokens: 5, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature' && /temperature/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens',
  );
  await assert.rejects(
    client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], n: 5 }), /* more than --parallel */
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n',
  );
});

test('errors: asking for what the worker does not implement is a 400 naming the field, not a plain answer', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  const cases = [
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }] }, 'tools'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } },
      'response_format.json_schema.schema'],
  ];
  for (const [extra, field] of cases) {
    await assert.rejects(
      client.chat.completions.create({ messages: msgs, max_tokens: 2, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === field && e.code === 'unsupported_parameter',
      field,
    );
  }
  await assert.rejects(
    client.completions.create({ prompt: 'x', max_tokens: 2, echo: true }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'echo' && e.code === 'unsupported_parameter',
  );
});

test('errors: a wrong key is a 401 AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${w.url}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'INVALID_API_KEY');
});
