// Benchmark (not a test): time to first token of a prompt that shares a long
// prefix with the one before it (--cache-prompt, issue 31's goal: under 10%
// of the first one's). Per repetition, a fresh prefix P of about N tokens
// (so A always starts cold), then A = P + X and B = P + Y, each a
// non-streaming completion of one token (its wall time is the prefill and one
// sampled token: the time to first token as a client sees it). Prints the
// medians of A and B, their ratio and B's cached tokens; run it once with
// --cache-prompt off too for the cold baseline.
// usage: RBEE_WORKER_BIN=... node bench_prompt_cache.mjs [prefix_tokens] [reps] [-- worker flags]
// (the worker's flags default to --local-mode; the context is sized to fit)
import { request, startWorker } from './worker_harness.mjs';

const dash = process.argv.indexOf('--');
const pos = dash < 0 ? process.argv.slice(2) : process.argv.slice(2, dash);
const flags = dash < 0 ? [] : process.argv.slice(dash + 1);
const target = Number(pos[0] || 2000);
const reps = Number(pos[1] || 5);
const v = ['And', 'God', 'said', 'unto', 'Moses', 'the', 'LORD', 'of', 'hosts', 'in', 'beginning', 'land', 'Egypt',
  'children', 'Israel', 'king', 'David', 'house', 'went', 'up', 'to', 'Jerusalem'];
const words = (n, seed) => {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return v[(s >>> 8) % v.length]; }).join(' ');
};
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const w = await startWorker(['--local-mode', '--parallel', '1', '--ctx-size', String(target + 512), ...flags]);
const tok = async (text) => JSON.parse((await request(w, 'POST', '/tokenize', { content: text, add_special: true })).body).tokens.length;
async function once(prompt) {
  const t0 = process.hrtime.bigint();
  const r = await request(w, 'POST', '/v1/completions', { prompt, max_tokens: 1, temperature: 0 });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 200) throw new Error(r.body);
  return { ms, usage: JSON.parse(r.body).usage };
}
let n = target; // words for about `target` tokens
for (let i = 0; i < 4; i++) n = Math.max(1, Math.round(n * target / await tok(words(n, 1))));
await once(words(64, 999)); // warm-up
const ta = [], tb = [];
let cached = 0, promptTokens = 0;
for (let r = 0; r < reps; r++) {
  const P = words(n, 100 + r);
  const a = await once(`${P} ${words(20, 7000 + r)}`), b = await once(`${P} ${words(20, 8000 + r)}`);
  ta.push(a.ms);
  tb.push(b.ms);
  cached = b.usage.prompt_tokens_details.cached_tokens;
  promptTokens = b.usage.prompt_tokens;
}
const [ma, mb] = [median(ta), median(tb)];
console.log('| prompt tokens (B) | cached (B) | TTFT A ms | TTFT B ms | B / A |');
console.log('| --- | --- | --- | --- | --- |');
console.log(`| ${promptTokens} | ${cached} | ${ma.toFixed(1)} | ${mb.toFixed(1)} | ${(mb / ma).toFixed(3)} |`);
await w.stop();
