// Tool calls through the official `openai` npm client against llm-worker-rbee
// serving the bundled default model (its float32 HF folder) with the REAL chat
// templates of Llama 3.1 (tests/data/chat_tools/llama3_1.json, llama.cpp's copy
// of Meta's template) and Qwen 2.5 (tests/data/chat/qwen2_5.json) put in its
// tokenizer_config.json, and for one forced call Mistral Nemo's (whose template
// takes back only 9-character call ids). The model's output is random text, so:
// - history with tools, assistant tool_calls (arguments as JSON text) and tool
//   results renders as the references say: usage.prompt_tokens equals the
//   token count of the reference render (jinja2's / transformers' text,
//   tokenized by /tokenize);
// - tool_choice "auto" on random output: no call is invented, the text stays
//   content, and the stream reassembles to the same message as the full
//   answer for the same seed;
// - tool_choice "required" and a named function force a call (constrained
//   decoding): the answer's tool_calls parse, name one of the two functions
//   (or the named one), the arguments validate against that function's
//   parameters schema (ajv), finish_reason is "tool_calls", and the streamed
//   deltas reassemble to the same calls as the full answer for the same seed;
// - bad tool fields are 400s naming the field.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { killAll, request, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
if (!SRC) throw new Error('RBEE_SOURCE_DIR is not set');
const HF = path.join(SRC, 'models/default/hf');
const llamaRef = JSON.parse(fs.readFileSync(path.join(SRC, 'tests/data/chat_tools/llama3_1.json'), 'utf8'));
const qwenRef = JSON.parse(fs.readFileSync(path.join(SRC, 'tests/data/chat/qwen2_5.json'), 'utf8'));
const mistralRef = JSON.parse(fs.readFileSync(path.join(SRC, 'tests/data/chat/mistral_nemo.json'), 'utf8'));

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city'], additionalProperties: false },
  },
};
const TIME = {
  type: 'function',
  function: {
    name: 'get_time', description: 'Local time in a zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] }, hours24: { type: 'boolean' } }, required: ['zone', 'hours24'], additionalProperties: false },
  },
};
const TOOLS = [WEATHER, TIME];
const MSGS = [{ role: 'user', content: 'What is the weather in Paris?' }];

// Under the sanitizers the worker is ~10x slower and these long prompts
// (the Llama template prints each tool as indented JSON) dominate: fewer
// seeds and cases there, the same checks.
const SAN = process.env.RBEE_SANITIZE === 'ON';
const seeds = (list) => (SAN ? list.slice(0, 1) : list);

const dirs = [];
const workers = {};
const clients = {};

// The default model in a folder whose tokenizer_config.json carries template.
function modelWith(template) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rbee-tools-model-'));
  for (const f of ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json'])
    fs.symlinkSync(path.join(HF, f), path.join(dir, f));
  const cfg = JSON.parse(fs.readFileSync(path.join(HF, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = template;
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  dirs.push(dir);
  return dir;
}

before(async () => {
  const [l, q, m] = await Promise.all([
    startWorker(['--local-mode', '--parallel', '2', '--ctx-size', '4096', '--model', modelWith(llamaRef.template)]),
    startWorker(['--local-mode', '--parallel', '2', '--ctx-size', '4096', '--model', modelWith(qwenRef.template)]),
    startWorker(['--local-mode', '--parallel', '1', '--ctx-size', '4096', '--model', modelWith(mistralRef.template)]),
  ]);
  Object.assign(workers, { llama: l, qwen: q, mistral: m });
  for (const [k, w] of Object.entries(workers))
    clients[k] = new OpenAI({ apiKey: 'x', baseURL: `${w.url}/v1`, maxRetries: 0, timeout: 120000 });
});
after(async () => {
  try {
    for (const w of Object.values(workers)) assert.equal((await w.stop()).code, 0);
  } finally {
    killAll();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
});

async function tokenCount(w, text) {
  const info = JSON.parse((await request(w, 'GET', '/props')).body);
  const bos = info.bos_token;
  // the worker adds the tokenizer's BOS unless the template wrote it
  const r = await request(w, 'POST', '/tokenize', { content: text, add_special: !(bos && text.startsWith(bos)), parse_special: true });
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body).tokens.length;
}

// OpenAI's wire shape of a template-shaped conversation: arguments as JSON text, content null.
function toWire(msgs) {
  return msgs.map((m) => (m.tool_calls ? {
    ...m, content: null,
    tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })),
  } : m));
}

test('tools, tool calls and tool results in the history render as the references say', async () => {
  let n = 0;
  const sets = [
    ['llama', llamaRef.cases.slice(SAN ? 2 : 0).map((c) => [c.messages_openai, c])],
    ['qwen', qwenRef.cases.filter((c) => JSON.stringify(c.messages).includes('tool') || c.extra.tools).map((c) => [toWire(c.messages), c])],
  ];
  for (const [k, cases] of sets) {
    for (const [messages, c] of cases) {
      if (!c.add_generation_prompt || Object.keys(c.extra).some((x) => x !== 'tools')) continue;
      const r = await clients[k].chat.completions.create({ messages, ...(c.extra.tools ? { tools: c.extra.tools } : {}), max_tokens: 1, temperature: 0 });
      assert.equal(r.usage.prompt_tokens, await tokenCount(workers[k], c.rendered), `${k}: ${JSON.stringify(messages)}`);
      n++;
    }
  }
  assert.equal(n, (SAN ? 3 : 5) + 3);
});

// Reassembles a chat stream into {content, tool_calls, finish_reason}.
async function streamed(client, body) {
  const s = await client.chat.completions.create({ ...body, stream: true });
  let content = null;
  const calls = [];
  let finish = null;
  for await (const ch of s) {
    assert.equal(ch.choices.length, 1);
    const c = ch.choices[0];
    const d = c.delta;
    if (typeof d.content === 'string' && d.content.length) content = (content ?? '') + d.content;
    for (const t of d.tool_calls ?? []) {
      if (t.id) {
        assert.equal(t.index, calls.length);
        assert.equal(t.type, 'function');
        assert.equal(t.function.arguments, '');
        calls.push({ id: t.id, type: 'function', function: { name: t.function.name, arguments: '' } });
      } else {
        assert.equal(t.index, calls.length - 1);
        assert.equal(t.function.name, undefined);
        calls[t.index].function.arguments += t.function.arguments;
      }
    }
    if (c.finish_reason) {
      assert.equal(finish, null);
      finish = c.finish_reason;
    }
  }
  return { content, tool_calls: calls, finish_reason: finish };
}

const stripIds = (calls) => (calls ?? []).map((c) => ({ type: c.type, function: c.function }));

test('auto on output that is no call: plain content, and the stream equals the full answer', async () => {
  for (const k of ['llama', 'qwen']) {
    for (const seed of seeds([1, 2])) {
      const body = { messages: MSGS, tools: TOOLS, max_tokens: 20, temperature: 1, seed };
      const full = await clients[k].chat.completions.create(body);
      const m = full.choices[0].message;
      assert.equal(typeof m.content, 'string');
      assert.equal(m.tool_calls, undefined);
      assert.notEqual(full.choices[0].finish_reason, 'tool_calls');
      const s = await streamed(clients[k], body);
      assert.equal(s.content ?? '', m.content, `${k} seed ${seed}`);
      assert.equal(s.tool_calls.length, 0);
      assert.equal(s.finish_reason, full.choices[0].finish_reason);
    }
  }
});

const ajv = new Ajv({ strict: true, allErrors: true });
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

// Checks one forced call: a known (or the named) function, arguments valid for its schema.
function checkCall(c, family, named) {
  assert.match(c.id, family === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
  assert.equal(c.type, 'function');
  if (named) assert.equal(c.function.name, named);
  const v = validators[c.function.name];
  assert.ok(v, `unknown function ${c.function.name}`);
  const args = JSON.parse(c.function.arguments);
  assert.ok(v(args), `${c.function.name}(${c.function.arguments}): ${ajv.errorsText(v.errors)}`);
}

async function forced(k, extra, seeds) {
  const names = new Set();
  const counts = [];
  for (const seed of seeds) {
    const body = { messages: MSGS, tools: TOOLS, max_tokens: 300, temperature: 1, seed, ...extra };
    const full = await clients[k].chat.completions.create(body);
    const ch = full.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', `${k} seed ${seed}: ${JSON.stringify(ch.message)}`);
    assert.equal(ch.message.content, null);
    assert.ok(ch.message.tool_calls.length >= 1);
    if (extra.parallel_tool_calls === false) assert.equal(ch.message.tool_calls.length, 1);
    counts.push(ch.message.tool_calls.length);
    const named = extra.tool_choice?.function?.name;
    for (const c of ch.message.tool_calls) {
      checkCall(c, k, named);
      names.add(c.function.name);
    }
    // the stream reassembles to the same calls
    const s = await streamed(clients[k], body);
    assert.equal(s.finish_reason, 'tool_calls');
    assert.equal(s.content, null);
    assert.deepEqual(stripIds(s.tool_calls), stripIds(ch.message.tool_calls), `${k} seed ${seed}`);
    for (const c of s.tool_calls) checkCall(c, k, named);
    // the call and a result go back through the template
    const next = await clients[k].chat.completions.create({
      messages: [...MSGS, { role: 'assistant', content: null, tool_calls: ch.message.tool_calls.slice(0, 1) },
        { role: 'tool', tool_call_id: ch.message.tool_calls[0].id, content: '{"ok": true}' }],
      tools: TOOLS, max_tokens: 2, temperature: 0,
    });
    assert.ok(next.usage.prompt_tokens > full.usage.prompt_tokens);
  }
  return { names, counts };
}

test('required: a call of one of the two functions, arguments valid for its schema, stream = full answer', async () => {
  for (const [k, list] of [['llama', seeds([1, 2])], ['qwen', seeds([1, 2])], ['mistral', [1]]]) {
    const { names } = await forced(k, { tool_choice: 'required', parallel_tool_calls: false }, list);
    assert.ok(names.size >= 1);
  }
});

test('a named function: every call is that function', async () => {
  for (const k of ['llama', 'qwen']) {
    const { names } = await forced(k, { tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false }, [11]);
    assert.deepEqual([...names], ['get_time']);
  }
  // the legacy fields
  const r = await clients.qwen.chat.completions.create({
    messages: MSGS, functions: TOOLS.map((t) => t.function), function_call: { name: 'get_weather' }, parallel_tool_calls: false, max_tokens: 300, seed: 5,
  });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  checkCall(r.choices[0].message.tool_calls[0], 'qwen', 'get_weather');
});

test('required with parallel calls (Qwen): one or more calls, each valid', { skip: SAN && 'slow under the sanitizers' }, async () => {
  const { counts } = await forced('qwen', { tool_choice: 'required', parallel_tool_calls: true, max_tokens: 1200 }, [21]);
  assert.ok(counts.every((n) => n >= 1 && n <= 8), String(counts)); // at most 8 forced calls
});

test('bad tool fields are 400s naming the field', async () => {
  const c = clients.qwen;
  const cases = [
    [{ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'tools[0].function'],
    [{ tools: [{ type: 'code' }] }, 'tools[0]'],
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_news' } } }, 'tool_choice'],
    [{ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice'],
    [{ tool_choice: 'required' }, 'tool_choice'],
    [{ tools: TOOLS, parallel_tool_calls: 1 }, 'parallel_tool_calls'],
    [{ messages: [{ role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f', arguments: 3 } }] }] }, 'messages[0]'],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'array' } } }], tool_choice: 'required' }, 'tools[0].function.parameters'],
    [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice'],
    [{ tools: [TIME, { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } } }], tool_choice: 'required' }, 'tools[1].function.parameters'],
  ];
  for (const [extra, field] of cases) {
    await assert.rejects(
      c.chat.completions.create({ messages: MSGS, max_tokens: 2, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === field,
      field,
    );
  }
});
