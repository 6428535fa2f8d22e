// Node side of gen_chat_token_refs.py: tokenizes rendered chat prompts with
// HF `tokenizers` (npm tokenizers@0.23.2, the Rust core's Node binding) twice:
// all special-token text as control tokens, and special tokens only where the
// template wrote them (cut at the special tokens that overlap no request span,
// pieces encoded by the same tokenizer without its special added tokens).
// usage: node hf_chat_ids.mjs TOKENIZER_JSON CASES_JSON   (cases: [{rendered, spans: [[b, e], ...]}])
// prints {tokenizers_version, cases: [{ids, ids_all_special, injected}]}
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(path.dirname(new URL(import.meta.url).pathname), 'x.js'));
const { Tokenizer } = require('tokenizers');
const version = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;

const [tokFile, casesFile] = process.argv.slice(2);
const json = JSON.parse(fs.readFileSync(tokFile, 'utf8'));
const specials = json.added_tokens.filter((t) => t.special);
for (const t of specials)
  if (t.lstrip || t.rstrip || t.single_word) throw new Error(`special token ${t.content} strips: cuts would be wrong`);
const specialId = new Map(specials.map((t) => [t.content, t.id]));
const full = Tokenizer.fromFile(tokFile);
const plainJson = { ...json, added_tokens: json.added_tokens.filter((t) => !t.special) };
const plain = Tokenizer.fromString(JSON.stringify(plainJson));
// tokenizers numbers added tokens in list order from the model's vocabulary
// size, so the kept ones may move: map them back to their ids.
const remap = new Map();
for (const t of plainJson.added_tokens) remap.set(plain.tokenToId(t.content), t.id);
const unmap = (ids) => ids.map((id) => (remap.has(id) ? remap.get(id) : id));

const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8'));
const out = [];
for (const c of cases) {
  const text = c.rendered;
  const enc = await full.encode(text, null, { addSpecialTokens: false });
  const idsAll = enc.getIds();
  const toks = enc.getTokens();
  const offs = enc.getOffsets();
  const cuts = [];
  let injected = false;
  for (let i = 0; i < idsAll.length; i++) {
    if (!specialId.has(toks[i]) || specialId.get(toks[i]) !== idsAll[i]) continue;
    const [b, e] = offs[i];
    if (text.slice(b, e) !== toks[i]) throw new Error(`offsets of ${toks[i]} do not index the text`);
    if (c.spans.some(([sb, se]) => sb < e && b < se)) injected = true;
    else cuts.push([b, e, idsAll[i]]);
  }
  const ids = [];
  let pos = 0;
  for (const [b, e, id] of [...cuts, [text.length, text.length, null]]) {
    if (b > pos) ids.push(...unmap((await plain.encode(text.slice(pos, b), null, { addSpecialTokens: false })).getIds()));
    if (id !== null) ids.push(id);
    pos = e;
  }
  out.push({ ids, ids_all_special: idsAll, injected });
}
process.stdout.write(JSON.stringify({ tokenizers_version: version, cases: out }));
