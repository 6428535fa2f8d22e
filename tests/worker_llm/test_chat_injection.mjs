// Special-token text in chat requests against the real llm-worker-rbee: the
// bundled default model served from a folder whose tokenizer_config.json
// adds the chat template of tests/data/chat_tokens/rbee_default.json (its
// turns are delimited by the model's own <|begin_of_text|> / <|end_of_text|>).
// usage.prompt_tokens must be the length of HF tokenizers' ids with special
// tokens only where the template wrote them, not of the ids a message could
// forge (ids_all_special), and a request without such text is unchanged.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { killAll, request, startWorker } from './worker_harness.mjs';

const SRC = process.env.RBEE_SOURCE_DIR;
if (!SRC) throw new Error('RBEE_SOURCE_DIR is not set');
const ref = JSON.parse(fs.readFileSync(path.join(SRC, 'tests/data/chat_tokens/rbee_default.json'), 'utf8'));
let w;
let dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rbee-chat-model-'));
  const hf = path.join(SRC, 'models/default/hf');
  for (const f of ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json'])
    fs.symlinkSync(path.join(hf, f), path.join(dir, f));
  const cfg = JSON.parse(fs.readFileSync(path.join(hf, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = ref.template;
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  w = await startWorker(['--local-mode', '--model', dir]);
});
after(async () => {
  try {
    const r = await w.stop();
    assert.equal(r.code, 0);
  } finally {
    killAll();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the worker serves the folder with its own chat template', async () => {
  const r = await request(w, 'GET', '/v1/info');
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).chat_template, 'model');
});

test('prompt_tokens count special tokens only where the template wrote them', async () => {
  let injected = 0;
  for (const c of ref.cases) {
    const r = await request(w, 'POST', '/v1/chat/completions', { messages: c.messages, max_tokens: 1, temperature: 0 });
    assert.equal(r.status, 200, r.body);
    const usage = JSON.parse(r.body).usage;
    assert.equal(usage.prompt_tokens, c.ids.length, `messages ${JSON.stringify(c.messages)}`);
    if (c.injected) {
      assert.notEqual(usage.prompt_tokens, c.ids_all_special.length);
      injected++;
    }
  }
  assert.equal(injected, 3);
});

test('a streamed request counts the same prompt', async () => {
  const c = ref.cases.find((x) => x.injected);
  const r = await request(w, 'POST', '/v1/chat/completions', {
    messages: c.messages, max_tokens: 1, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  assert.equal(r.status, 200);
  const usage = r.body.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)))
    .find((e) => e.usage)?.usage;
  assert.ok(usage, r.body);
  assert.equal(usage.prompt_tokens, c.ids.length);
});
