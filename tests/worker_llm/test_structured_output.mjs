// Structured output through the official `openai` npm package against
// llm-worker-rbee on the bundled model (random KJV text, so every grammar
// decision is the mask's, not the model's good sense), checked by an
// independent validator (ajv, JSON Schema draft 2020-12, with ajv-formats):
// - response_format json_schema (nested objects, a $ref, arrays with
//   minItems/maxItems, enums, a date) with temperature 1 on 50 seeds, chat and
//   completions, streamed and not: every output validates and ends with
//   finish_reason "stop";
// - json_object mode parses as a JSON object (logit_bias nudges quotes and
//   braces so the toy model closes its strings; the mask still rules);
// - a GBNF `grammar` (llama-server's field) and the guided_json /
//   guided_grammar / json_schema aliases match their grammars;
// - the logprobs stay the raw model's (tokens the grammar forbade show up
//   among the top alternatives);
// - bad schemas and grammars are 400s naming the field with the compiler's
//   message (line and column for GBNF), unsupported keywords named.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import OpenAI from 'openai';
import { killAll, request, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
if (!SRC) throw new Error('RBEE_SOURCE_DIR must be set');
const HF = `${SRC}/models/default/hf`;
const TOKEN = `tok-${process.pid}-${Date.now()}`;
let w, client;

before(async () => {
  w = await startWorker(['--local-mode', '--parallel', '5', '--model', HF], { LLORCH_API_TOKEN: TOKEN });
  client = new OpenAI({ apiKey: TOKEN, baseURL: `${w.url}/v1`, maxRetries: 0, timeout: 300000 });
});
after(async () => {
  try {
    assert.equal((await w.stop()).code, 0);
  } finally {
    killAll();
  }
});

const schema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 8 },
    kind: { enum: ['prophet', 'king', 'judge', null] },
    age: { type: 'integer' },
    score: { type: 'number' },
    born: { type: 'string', format: 'date' },
    home: { $ref: '#/$defs/place' },
    tags: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 4 }, minItems: 1, maxItems: 3 },
    sons: { type: 'array', items: { $ref: '#/$defs/place' }, maxItems: 2 },
    alive: { type: 'boolean' },
  },
  required: ['name', 'kind', 'home', 'tags'],
  additionalProperties: false,
  $defs: {
    place: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 6 }, tribe: { enum: ['Judah', 'Levi', 'Dan'] } },
      required: ['tribe'],
      additionalProperties: false,
    },
  },
};
const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
const validate = ajv.compile(schema);
const rf = { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } };

function checkDoc(text, what) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
  assert.ok(validate(doc), `${what}: ${ajv.errorsText(validate.errors)}: ${text}`);
}

async function chatTexts(req) {
  if (!req.stream) {
    const r = await client.chat.completions.create(req);
    return r.choices.map((c) => ({ i: c.index, text: c.message.content, fin: c.finish_reason }));
  }
  const out = [];
  for await (const chunk of await client.chat.completions.create(req)) {
    for (const c of chunk.choices) {
      out[c.index] ??= { i: c.index, text: '', fin: null };
      out[c.index].text += c.delta?.content ?? '';
      if (c.finish_reason) out[c.index].fin = c.finish_reason;
    }
  }
  return out;
}

async function completionTexts(req) {
  if (!req.stream) {
    const r = await client.completions.create(req);
    return r.choices.map((c) => ({ i: c.index, text: c.text, fin: c.finish_reason }));
  }
  const out = [];
  for await (const chunk of await client.completions.create(req)) {
    for (const c of chunk.choices) {
      out[c.index] ??= { i: c.index, text: '', fin: null };
      out[c.index].text += c.text ?? '';
      if (c.finish_reason) out[c.index].fin = c.finish_reason;
    }
  }
  return out;
}

// n = 5 choices per request (choice i samples with seed + i): 10 requests make
// 50 seeds, chat and completions, streamed and not (each kind on some seeds).
test('json_schema: 50 seeds at temperature 1 validate, chat and completions, streamed and not', async () => {
  let checked = 0;
  for (let s = 0; s < 10; s++) {
    const seed = 1000 + 5 * s;
    const stream = s % 2 === 1;
    const chat = s % 4 < 2;
    const common = { max_tokens: 480, temperature: 1, seed, n: 5, response_format: rf, stream };
    const outs = chat ? await chatTexts({ messages: [{ role: 'user', content: 'Who?' }], ...common })
      : await completionTexts({ prompt: 'And God said', ...common });
    assert.equal(outs.length, 5);
    for (const o of outs) {
      assert.equal(o.fin, 'stop', o.text);
      checkDoc(o.text, `${chat ? 'chat' : 'completion'}${stream ? ' stream' : ''} seed ${seed + o.i}`);
      checked++;
    }
  }
  assert.equal(checked, 50);
});

test('json_schema: a stream gives the same documents as the same request unstreamed', async () => {
  const req = { messages: [{ role: 'user', content: 'Who?' }], max_tokens: 480, temperature: 1, seed: 77, n: 3, response_format: rf };
  const full = await chatTexts(req);
  const streamed = await chatTexts({ ...req, stream: true });
  assert.deepEqual(streamed.map((o) => o.text), full.map((o) => o.text));
  for (const o of full) checkDoc(o.text, `seed ${77 + o.i}`);
});

async function tokenId(text) {
  const r = await request(w, 'POST', '/tokenize', { content: text, add_special: false });
  const ids = JSON.parse(r.body).tokens;
  return ids.length === 1 ? ids[0] : null;
}

test('json_object mode: the output parses as a JSON object', async () => {
  // the toy model (KJV text has no ") never closes a string by itself: raise
  // " a lot and } somewhat, so objects with several members end in time
  const logit_bias = { [await tokenId('"')]: 40, [await tokenId('}')]: 15 };
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Give JSON' }], response_format: { type: 'json_object' },
    max_tokens: 480, temperature: 1, seed: 42, n: 5, logit_bias,
  });
  let members = 0;
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop', c.message.content);
    const doc = JSON.parse(c.message.content);
    assert.equal(typeof doc, 'object');
    assert.ok(doc !== null && !Array.isArray(doc));
    members += (c.message.content.match(/":/g) ?? []).length;
  }
  assert.ok(members >= 5, 'the objects have members');
});

test('GBNF grammar and the guided_* / json_schema aliases', async () => {
  const grammar = 'root ::= answer ", " word{1,3} "."\nanswer ::= "yes" | "no"\nword ::= [a-z]{1,5} " "?\n';
  const re = /^(yes|no), ([a-z]{1,5} ?){1,3}\.$/;
  for (let seed = 0; seed < 10; seed++) {
    const r = await client.completions.create({ prompt: 'And he said', max_tokens: 100, temperature: 1, seed, grammar });
    assert.match(r.choices[0].text, re);
    assert.equal(r.choices[0].finish_reason, 'stop');
  }
  const g2 = await client.completions.create({ prompt: 'And', max_tokens: 50, temperature: 1, seed: 3, guided_grammar: 'root ::= [0-9]{3} "-" [0-9]{2}' });
  assert.match(g2.choices[0].text, /^[0-9]{3}-[0-9]{2}$/);
  const small = { type: 'object', properties: { n: { type: 'integer' }, t: { enum: ['a', 'b'] } }, required: ['n', 't'], additionalProperties: false };
  const v = ajv.compile(small);
  for (const field of ['guided_json', 'json_schema']) {
    const r = await client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 200, temperature: 1, seed: 9, [field]: small });
    assert.ok(v(JSON.parse(r.choices[0].message.content)), `${field}: ${r.choices[0].message.content}`);
  }
  // vLLM also takes the schema as text
  const r = await client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 200, temperature: 1, seed: 9, guided_json: JSON.stringify(small) });
  assert.ok(v(JSON.parse(r.choices[0].message.content)));
});

test('max_tokens cutting a grammar short gives finish_reason length', async () => {
  const r = await client.completions.create({ prompt: 'And', max_tokens: 3, temperature: 1, seed: 1, grammar: 'root ::= "x"{20}' });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].text, 'x'.repeat(r.choices[0].text.length));
});

test('logprobs stay the raw model\'s under a grammar', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Who?' }], max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: 5,
    grammar: 'root ::= "{}"',
  });
  const e = r.choices[0].logprobs.content[0];
  assert.ok(e.token.startsWith('{'), e.token);
  // the raw model's favourites are text, not braces: the grammar masked them for sampling only
  assert.ok(e.top_logprobs.some((t) => !t.token.startsWith('{')), JSON.stringify(e.top_logprobs));
  assert.ok(e.top_logprobs[0].logprob > e.logprob, 'the picked brace is not the raw favourite');
});

test('bad schemas and grammars are 400s naming the field', async () => {
  const cases = [
    [{ grammar: 'root ::= "a" |\n  [b-' }, 'grammar', /line 2, column 3: unterminated character class/],
    [{ grammar: 'root ::= x' }, 'grammar', /undefined rule 'x'/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a$' } } } },
      'response_format.json_schema.schema', /unsupported keyword 'pattern'/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', minProperties: 2 } } } },
      'response_format.json_schema.schema', /unsupported keyword 'minProperties'/, 'unsupported_parameter'],
    [{ json_schema: { type: 'string', minLength: 3, maxLength: 2 } }, 'json_schema', /minLength > maxLength/, 'invalid_json_schema'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema', /required/],
    [{ response_format: { type: 'yaml' } }, 'response_format', /json_object or json_schema/],
    [{ guided_json: '{not json' }, 'guided_json', /not JSON/],
    [{ json_schema: { $ref: '#/$defs/nope' } }, 'json_schema', /points nowhere/],
    [{ grammar: 'root ::= "a"', guided_json: {} }, 'guided_json', /give one/],
  ];
  for (const [extra, param, msg, code] of cases) {
    const r = await request(w, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 5, ...extra },
      { Authorization: `Bearer ${TOKEN}` });
    assert.equal(r.status, 400, r.body);
    const err = JSON.parse(r.body).error;
    assert.equal(err.param, param, r.body);
    assert.match(err.message, msg);
    if (code) assert.equal(err.code, code);
  }
});
