// Benchmark (not a test): aggregate decode tokens/s of llm-worker-rbee at
// --parallel 1, 4, 8, 16 on this machine. For each level it starts the
// worker, sends as many concurrent streaming completions as there are slots
// (max_tokens tokens each, EOS ignored so every sequence runs the full
// length), and reports the client-side aggregate rate (all generated tokens
// over the wall time, prefill included) and the worker's own decode rate
// (tokens over time spent in batched decode steps, from /metrics).
// usage: RBEE_WORKER_BIN=... node bench_parallel.mjs [max_tokens] [levels...]
import { metrics, request, startWorker } from './worker_harness.mjs';

const maxTokens = Number(process.argv[2] || 128);
const levels = process.argv.length > 3 ? process.argv.slice(3).map(Number) : [1, 4, 8, 16];
const prompts = ['And God said', 'In the beginning', 'And the LORD spake unto Moses', 'Blessed are the'];

console.log(`| parallel | sequences x tokens | wall s | client aggregate tok/s | worker decode tok/s |`);
console.log(`| --- | --- | --- | --- | --- |`);
for (const p of levels) {
  const w = await startWorker(['--local-mode', '--parallel', String(p), '--ctx-size', String(maxTokens + 32)]);
  await request(w, 'POST', '/v1/completions', { prompt: 'warm up', max_tokens: 8, temperature: 0 });
  const before = await metrics(w);
  const t0 = process.hrtime.bigint();
  const rs = await Promise.all(Array.from({ length: p }, (_, i) => request(w, 'POST', '/v1/completions',
    { prompt: prompts[i % prompts.length], max_tokens: maxTokens, temperature: 0.8, seed: i, ignore_eos: true })));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const tokens = rs.reduce((a, r) => a + JSON.parse(r.body).usage.completion_tokens, 0);
  const m = await metrics(w);
  await w.stop();
  void before;
  console.log(`| ${p} | ${p} x ${maxTokens} | ${secs.toFixed(2)} | ${(tokens / secs).toFixed(1)} | ${m.llorch_decode_tokens_per_second.toFixed(1)} |`);
}
