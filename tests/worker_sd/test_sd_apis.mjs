// sd-worker-rbee end to end with real clients, on the tiny sd15 fixture
// pipeline: the rbee job stream parsed as SSE (every step's progress in
// order, previews and images that decode as PNG and carry their infotext),
// the same seed giving byte-identical PNGs from the three APIs and from
// `rbee txt2img` / `rbee inpaint`, AUTOMATIC1111's /sdapi/v1 with a plain
// HTTP client using A1111's request and response fields (txt2img, img2img
// with a mask, n_iter seeds, progress with current_image, interrupt, skip,
// samplers, schedulers, sd-models, options, png-info), the official openai
// package's images.generate (b64_json) and images.edit, bad input (400
// naming the field), cancel mid-run and by disconnect, metrics that move by
// exactly what was generated, heartbeats and startup errors; without
// --model, the bundled default model.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import { BIN, killAll, metrics, request, sleep, startWorker } from './worker_harness.mjs';
import { CLI, MODEL, OTHER_VAE, REFS, b64, json, readPng, streamJob, writePng } from './sd_harness.mjs';

after(killAll);
const TOKEN = 'sd-secret';
let w;
before(async () => {
  w = await startWorker(['--model', MODEL, '--max-size', '256', '--bind', '127.0.0.1'], { LLORCH_API_TOKEN: TOKEN });
});

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rbee-sd-apis-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function job(body) {
  const r = await request(w, 'POST', '/v1/jobs', body);
  assert.equal(r.status, 200, r.body);
  const { job_id: id, sse_url: url } = json(r);
  assert.equal(url, `/v1/jobs/${id}/stream`);
  return { id, ...(await streamJob(w, id)) };
}

const pngOf = (s) => Buffer.from(s, 'base64');
const TAESD = path.join(process.env.RBEE_SOURCE_DIR, 'tests/data/sd/taesd');
const cli = (args) => {
  const r = spawnSync(CLI, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
};

test('rbee job stream: started, every step in order with its ETA, previews, one image event per image, end', async () => {
  const { id, events, done } = await job({ prompt: 'a red fox', width: 64, height: 64, steps: 6, seed: 11,
    batch_size: 2, preview_every: 2, sampler: 'euler_a' });
  assert.ok(done, 'the stream ends with [DONE]');
  assert.equal(events[0].type, 'started');
  assert.equal(events[0].job_id, id);
  assert.equal(events[0].seed, 11);
  const progress = events.filter((e) => e.type === 'progress');
  assert.deepEqual(progress.map((e) => e.step), [1, 2, 3, 4, 5, 6]);
  for (const e of progress) {
    assert.equal(e.total, 6);
    assert.ok(Number.isInteger(e.eta_ms) && e.eta_ms >= 0);
  }
  assert.equal(progress[5].eta_ms, 0);
  assert.deepEqual(progress.filter((e) => e.preview).map((e) => e.step), [2, 4]); // not at the last step
  for (const e of progress.filter((e) => e.preview)) {
    const p = readPng(pngOf(e.preview));
    assert.deepEqual([p.width, p.height, p.channels], [16, 8, 3]); // the batch side by side at latent size
  }
  const images = events.filter((e) => e.type === 'image');
  assert.deepEqual(images.map((e) => e.index), [0, 1]);
  images.forEach((e, i) => {
    assert.equal(e.seed, 11);
    const p = readPng(pngOf(e.png));
    assert.deepEqual([p.width, p.height, p.channels], [64, 64, 3]);
    assert.equal(p.texts.parameters, e.infotext);
    assert.match(e.infotext, /^a red fox\nSteps: 6, Sampler: Euler a, Schedule type: Automatic, CFG scale: 7\.5, Seed: 11, Size: 64x64, Model: sd15, RNG: CPU, Batch size: 2, Batch pos: (\d)$/);
    assert.ok(e.infotext.endsWith(`Batch pos: ${i}`));
  });
  assert.notEqual(images[0].png, images[1].png);
  const end = events[events.length - 1];
  assert.equal(end.type, 'end');
  assert.equal(end.images, 2);
  assert.equal(end.stop_reason, 'completed');
  assert.deepEqual(events.map((e) => e.type).filter((t, i, a) => t !== a[i - 1]), ['started', 'progress', 'image', 'end']);
  const st = json(await request(w, 'GET', `/v1/jobs/${id}`));
  assert.equal(st.state, 'done');
  assert.equal(st.images, 2);
  assert.equal(st.result.type, 'end');
});

test('one seed, one picture: rbee job, A1111 txt2img, OpenAI images.generate and rbee txt2img give the same PNG bytes', async () => {
  const prompt = 'a lighthouse on a cliff';
  const seed = 1234;
  const rbee = (await job({ prompt, width: 64, height: 64, steps: 4, seed, cfg_scale: 7.5, sampler: 'euler' }))
    .events.find((e) => e.type === 'image');
  const a = json(await request(w, 'POST', '/sdapi/v1/txt2img', { prompt, width: 64, height: 64, steps: 4, seed,
    cfg_scale: 7.5, sampler_name: 'Euler', override_settings: { randn_source: 'CPU' } }));
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${w.url}/v1` });
  const o = await client.images.generate({ prompt, size: '64x64', n: 1, response_format: 'b64_json', seed, steps: 4,
    cfg_scale: 7.5, sampler: 'euler' });
  const file = path.join(tmp, 'cli.png');
  cli(['txt2img', '-m', MODEL, '-p', prompt, '-W', '64', '-H', '64', '--steps', '4', '--seed', String(seed), '--cfg',
    '7.5', '--sampler', 'euler', '-o', file, '-q']);
  const ref = fs.readFileSync(file);
  assert.ok(ref.length > 100);
  assert.ok(pngOf(rbee.png).equals(ref), 'rbee job != rbee txt2img');
  assert.ok(pngOf(a.images[0]).equals(ref), 'A1111 txt2img != rbee txt2img');
  assert.equal(o.data.length, 1);
  assert.ok(pngOf(o.data[0].b64_json).equals(ref), 'OpenAI images.generate != rbee txt2img');
  // A1111's default GPU seeds are the rbee job's "cuda" generator
  const ag = json(await request(w, 'POST', '/sdapi/v1/txt2img', { prompt, width: 64, height: 64, steps: 4, seed,
    cfg_scale: 7.5, sampler_name: 'Euler' }));
  const rg = (await job({ prompt, width: 64, height: 64, steps: 4, seed, sampler: 'euler', rng: 'cuda' }))
    .events.find((e) => e.type === 'image');
  assert.ok(pngOf(ag.images[0]).equals(pngOf(rg.png)));
  assert.ok(!pngOf(ag.images[0]).equals(ref));
  assert.doesNotMatch(readPng(pngOf(ag.images[0])).texts.parameters, /RNG: CPU/);
});

test('A1111 txt2img: images, parameters and info as A1111 answers them; n_iter runs seed, seed + batch, ...', async () => {
  const body = { prompt: 'a (red:1.2) barn', negative_prompt: 'fog', seed: 40, steps: 3, cfg_scale: 6, width: 64,
    height: 64, batch_size: 1, n_iter: 2, sampler_name: 'DPM++ 2M Karras', restore_faces: false, enable_hr: false,
    override_settings: { randn_source: 'CPU' } };
  const r = await request(w, 'POST', '/sdapi/v1/txt2img', body);
  assert.equal(r.status, 200, r.body);
  const res = json(r);
  assert.deepEqual(Object.keys(res).sort(), ['images', 'info', 'parameters']);
  assert.equal(res.images.length, 2);
  assert.equal(typeof res.info, 'string');
  const info = JSON.parse(res.info);
  for (const k of ['prompt', 'all_prompts', 'negative_prompt', 'all_negative_prompts', 'seed', 'all_seeds', 'subseed',
    'all_subseeds', 'subseed_strength', 'width', 'height', 'sampler_name', 'cfg_scale', 'steps', 'batch_size',
    'restore_faces', 'sd_model_name', 'denoising_strength', 'extra_generation_params', 'index_of_first_image',
    'infotexts', 'styles', 'job_timestamp', 'clip_skip', 'version'])
    assert.ok(k in info, `info.${k}`);
  assert.deepEqual(info.all_seeds, [40, 41]);
  assert.equal(info.sampler_name, 'DPM++ 2M');
  assert.equal(info.extra_generation_params['Schedule type'], 'Karras');
  assert.equal(info.sd_model_name, 'sd15');
  assert.equal(info.clip_skip, 1);
  assert.equal(res.parameters.sampler_name, 'DPM++ 2M');
  assert.equal(res.parameters.seed, 40);
  res.images.forEach((img, i) => {
    const p = readPng(pngOf(img));
    assert.equal(p.texts.parameters, info.infotexts[i]);
    assert.match(info.infotexts[i], new RegExp(`^a \\(red:1\\.2\\) barn\\nNegative prompt: fog\\nSteps: 3, Sampler: DPM\\+\\+ 2M, Schedule type: Karras, CFG scale: 6, Seed: ${40 + i}, Size: 64x64, Model: sd15, RNG: CPU$`));
  });
  // the second run is the run of seed 41 on its own
  const second = json(await request(w, 'POST', '/sdapi/v1/txt2img', { ...body, seed: 41, n_iter: 1 }));
  assert.ok(pngOf(second.images[0]).equals(pngOf(res.images[1])));
  // send_images: false keeps the images out
  const none = json(await request(w, 'POST', '/sdapi/v1/txt2img', { ...body, n_iter: 1, send_images: false }));
  assert.equal(none.images.length, 0);
  assert.equal(JSON.parse(none.info).infotexts.length, 1);
});

test('A1111 img2img with a mask equals rbee inpaint; png-info reads the infotext back', async () => {
  const init = path.join(REFS, 'init_image.png');
  const mask = path.join(REFS, 'mask.png');
  const r = await request(w, 'POST', '/sdapi/v1/img2img', { prompt: 'a wooden bench', init_images: [b64(init)],
    mask: b64(mask), denoising_strength: 0.6, steps: 5, seed: 77, cfg_scale: 7.5, sampler_name: 'Euler',
    mask_blur: 0, inpainting_fill: 1, override_settings: { randn_source: 'CPU' } });
  assert.equal(r.status, 200, r.body);
  const img = pngOf(json(r).images[0]);
  const file = path.join(tmp, 'inpaint.png');
  cli(['inpaint', '-m', MODEL, '-p', 'a wooden bench', '--init-image', init, '--mask', mask, '--strength', '0.6',
    '--steps', '5', '--seed', '77', '--cfg', '7.5', '--sampler', 'euler', '-o', file, '-q']);
  assert.ok(img.equals(fs.readFileSync(file)), 'A1111 img2img != rbee inpaint');
  const info = json(await request(w, 'POST', '/sdapi/v1/png-info', { image: img.toString('base64') }));
  assert.equal(info.info, readPng(img).texts.parameters);
  assert.deepEqual(info.items, {});
  const p = info.parameters;
  assert.equal(p.Prompt, 'a wooden bench');
  assert.equal(p.Steps, '5');
  assert.equal(p.Sampler, 'Euler');
  assert.equal(p.Seed, '77');
  assert.equal(p['Size-1'], '64');
  assert.equal(p['Size-2'], '64');
  assert.equal(p['Denoising strength'], '0.6');
  // png-info of something that is not a PNG
  const bad = await request(w, 'POST', '/sdapi/v1/png-info', { image: Buffer.from('GIF89a....').toString('base64') });
  assert.equal(bad.status, 400);
  assert.equal(json(bad).errors[0].field, 'image');
});

test('A1111 lists and options', async () => {
  const samplers = json(await request(w, 'GET', '/sdapi/v1/samplers'));
  assert.deepEqual(samplers.map((s) => s.name), ['DPM++ 2M', 'DPM++ SDE', 'Euler a', 'Euler', 'Heun', 'LCM', 'DDIM']);
  assert.deepEqual(samplers.find((s) => s.name === 'Euler a').aliases, ['k_euler_a', 'k_euler_ancestral']);
  const sched = json(await request(w, 'GET', '/sdapi/v1/schedulers'));
  assert.ok(sched.some((s) => s.name === 'karras' && s.label === 'Karras'));
  const models = json(await request(w, 'GET', '/sdapi/v1/sd-models'));
  assert.equal(models.length, 1);
  assert.equal(models[0].title, 'sd15');
  assert.equal(models[0].model_name, 'sd15');
  const opts = json(await request(w, 'GET', '/sdapi/v1/options'));
  assert.equal(opts.sd_model_checkpoint, 'sd15');
  assert.equal(opts.CLIP_stop_at_last_layers, 1);
  assert.equal(opts.randn_source, 'GPU');
  // POST changes what later requests do: Clip skip 2 in the infotext
  assert.equal((await request(w, 'POST', '/sdapi/v1/options', { CLIP_stop_at_last_layers: 2, randn_source: 'CPU' })).status, 200);
  assert.equal(json(await request(w, 'GET', '/sdapi/v1/options')).CLIP_stop_at_last_layers, 2);
  const res = json(await request(w, 'POST', '/sdapi/v1/txt2img', { prompt: 'x', width: 64, height: 64, steps: 2, seed: 1 }));
  assert.match(JSON.parse(res.info).infotexts[0], /Clip skip: 2, RNG: CPU$/);
  // all or nothing: one bad key changes nothing
  const bad = await request(w, 'POST', '/sdapi/v1/options', { CLIP_stop_at_last_layers: 1, sd_model_checkpoint: 'other.safetensors' });
  assert.equal(bad.status, 400);
  assert.equal(json(bad).errors[0].field, 'sd_model_checkpoint');
  assert.equal(json(await request(w, 'GET', '/sdapi/v1/options')).CLIP_stop_at_last_layers, 2);
  assert.equal((await request(w, 'POST', '/sdapi/v1/options', { CLIP_stop_at_last_layers: 1, randn_source: 'GPU' })).status, 200);
});

// Polls /sdapi/v1/progress until cond(progress) holds.
async function progressUntil(cond, ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const p = json(await request(w, 'GET', '/sdapi/v1/progress'));
    if (cond(p)) return p;
    if (Date.now() - t0 > ms) throw new Error(`progress never got there: ${JSON.stringify(p)}`);
    await sleep(20);
  }
}

test('A1111 progress with current_image, interrupt and skip', async () => {
  const idle = json(await request(w, 'GET', '/sdapi/v1/progress'));
  assert.equal(idle.progress, 0);
  assert.equal(idle.state.job_count, 0);
  assert.equal(idle.current_image, null);
  const body = { prompt: 'a slow one', width: 64, height: 64, steps: 150, seed: 5,
    override_settings: { show_progress_every_n_steps: 2 } };
  const running = request(w, 'POST', '/sdapi/v1/txt2img', body);
  const p = await progressUntil((q) => q.state.sampling_step >= 4 && q.current_image);
  assert.equal(p.state.sampling_steps, 150);
  assert.ok(p.progress > 0 && p.progress < 1);
  assert.ok(p.eta_relative > 0);
  assert.deepEqual([readPng(pngOf(p.current_image)).width, readPng(pngOf(p.current_image)).height], [8, 8]);
  const skipped = json(await request(w, 'GET', '/sdapi/v1/progress?skip_current_image=true'));
  assert.equal(skipped.current_image, null);
  assert.equal(json(await request(w, 'POST', '/sdapi/v1/interrupt')).constructor, Object);
  const r = await running;
  assert.equal(r.status, 200, r.body);
  assert.equal(json(r).images.length, 0); // interrupted in its only run
  await progressUntil((q) => q.state.job_count === 0);
  // skip ends the current run and goes on with the next
  const two = request(w, 'POST', '/sdapi/v1/txt2img', { ...body, n_iter: 2, steps: 60,
    override_settings: { randn_source: 'CPU' } });
  await progressUntil((q) => q.state.job_no === 0 && q.state.sampling_step >= 3);
  await request(w, 'POST', '/sdapi/v1/skip');
  const res = await two;
  assert.equal(res.status, 200, res.body);
  assert.deepEqual(JSON.parse(json(res).info).all_seeds, [6]); // only the second run's image
});

test('OpenAI images.generate and images.edit with the official client', async () => {
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${w.url}/v1` });
  const two = await client.images.generate({ prompt: 'two owls', size: '64x64', n: 2, response_format: 'b64_json', seed: 3, steps: 3 });
  assert.equal(two.data.length, 2);
  assert.ok(Number.isInteger(two.created));
  assert.match(readPng(pngOf(two.data[1].b64_json)).texts.parameters, /Seed: 3, .*Batch size: 2, Batch pos: 1$/);
  const jpg = await client.images.generate({ prompt: 'an owl', size: '64x64', output_format: 'jpeg', output_compression: 90, seed: 3, steps: 3 });
  const j = pngOf(jpg.data[0].b64_json);
  assert.deepEqual([j[0], j[1], j[j.length - 2], j[j.length - 1]], [0xff, 0xd8, 0xff, 0xd9]);
  // edit inside a transparent rectangle of an RGBA mask
  const image = await toFile(fs.readFileSync(path.join(REFS, 'init_image.png')), 'image.png', { type: 'image/png' });
  const maskPng = writePng(64, 64, (x, y) => (x >= 16 && x < 48 && y >= 16 && y < 48 ? [0, 0, 0, 0] : [0, 0, 0, 255]));
  const mask = await toFile(maskPng, 'mask.png', { type: 'image/png' });
  const ed = await client.images.edit({ image, mask, prompt: 'a bird', n: 1, response_format: 'b64_json', seed: 9, steps: 4 });
  const e = readPng(pngOf(ed.data[0].b64_json));
  assert.deepEqual([e.width, e.height], [64, 64]);
  assert.match(e.texts.parameters, /Denoising strength: 1, RNG: CPU$/); // inpainting's default
  // the same edit through rbee inpaint (the mask as white = repaint)
  const wm = path.join(tmp, 'white_mask.png');
  fs.writeFileSync(wm, writePng(64, 64, (x, y) => (x >= 16 && x < 48 && y >= 16 && y < 48 ? [255, 255, 255, 255] : [0, 0, 0, 255])));
  const file = path.join(tmp, 'edit.png');
  cli(['inpaint', '-m', MODEL, '-p', 'a bird', '--init-image', path.join(REFS, 'init_image.png'), '--mask', wm,
    '--steps', '4', '--seed', '9', '-o', file, '-q']);
  assert.ok(pngOf(ed.data[0].b64_json).equals(fs.readFileSync(file)), 'OpenAI edit != rbee inpaint');
  // no mask, an opaque image: the whole image is redrawn (img2img)
  const image2 = await toFile(fs.readFileSync(path.join(REFS, 'init_image.png')), 'image.png', { type: 'image/png' });
  const whole = await client.images.edit({ image: image2, prompt: 'a bird', seed: 9, steps: 5, strength: 0.6 });
  assert.match(readPng(pngOf(whole.data[0].b64_json)).texts.parameters, /Denoising strength: 0\.6, RNG: CPU$/);
  // refusals arrive as the client's BadRequestError, naming the field
  for (const [req, param] of [[{ prompt: 'x', size: '100x100' }, 'size'], [{ prompt: 'x', response_format: 'url' }, 'response_format'],
    [{ prompt: 'x', style: 'vivid' }, 'style'], [{ prompt: 'x', n: 20 }, 'n'], [{ prompt: 'x', sampler: 'LMS' }, 'sampler']]) {
    await assert.rejects(client.images.generate(req), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.param, param);
      return true;
    });
  }
  const image3 = await toFile(fs.readFileSync(path.join(REFS, 'init_image.png')), 'image.png', { type: 'image/png' });
  const small = await toFile(writePng(32, 32, () => [0, 0, 0, 0]), 'mask.png', { type: 'image/png' });
  await assert.rejects(client.images.edit({ image: image3, mask: small, prompt: 'x' }), (err) => err.status === 400 && err.param === 'mask');
});

test('bad input: 400 naming the field (rbee jobs)', async () => {
  const gif = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64').toString('base64');
  const mask32 = writePng(32, 32, () => [255, 255, 255, 255]).toString('base64');
  const cases = [
    [{ prompt: 'x', width: 65 }, 'width', 'multiple_of:8'],
    [{ prompt: 'x', height: 512 }, 'height', 'range:8..256'], // over --max-size
    [{ prompt: 'x', steps: 151 }, 'steps', 'range:1..150'],
    [{ prompt: 'x', cfg_scale: 31 }, 'cfg_scale', 'range:0..30'],
    [{ prompt: 'x', batch_size: 9 }, 'batch_size', 'range:1..8'],
    [{ prompt: 'x', sampler: 'LMS' }, 'sampler', 'enum'],
    [{ prompt: 'x', init_image: 'not base64!' }, 'init_image', 'base64'],
    [{ prompt: 'x', init_image: Buffer.from('hello').toString('base64') }, 'init_image', 'format'],
    [{ prompt: 'x', init_image: gif }, 'init_image', 'format'],
    [{ prompt: 'x', init_image: b64(path.join(REFS, 'init_image.png')), mask: mask32 }, 'mask', 'equals:init_image'],
    [{ prompt: 'x', mask: mask32 }, 'mask', 'needs:init_image'],
    [{ prompt: 'x', clip_skip: 5 }, 'clip_skip', 'model'], // the fixture's text encoder has 3 layers
    [{ prompt: 'x', sampler: 'ddim_karras' }, 'sampler', 'unsupported'],
    [{ prompt: 'x', strenght: 0.5 }, 'strenght', 'unknown_field'],
    [{ width: 64 }, 'prompt', 'required'],
  ];
  for (const [body, field, constraint] of cases) {
    const r = await request(w, 'POST', '/v1/jobs', body);
    assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.body}`);
    const errs = json(r).errors;
    assert.ok(errs.some((e) => e.field === field && e.constraint === constraint), `${field}: ${r.body}`);
  }
  const lms = json(await request(w, 'POST', '/v1/jobs', { prompt: 'x', sampler: 'LMS' })).errors[0].message;
  assert.match(lms, /valid samplers: euler, euler_a, heun, dpmpp_2m, dpmpp_sde, ddim, lcm/);
  const a = json(await request(w, 'POST', '/sdapi/v1/txt2img', { prompt: 'x', sampler_name: 'LMS Karras', width: 64, height: 64 }));
  assert.match(a.detail, /valid samplers: DPM\+\+ 2M, DPM\+\+ SDE, Euler a, Euler, Heun, LCM, DDIM/);
  assert.equal((await request(w, 'POST', '/v1/jobs', '{"prompt": ')).status, 400);
  const noauth = await request({ ...w, headers: {} }, 'POST', '/v1/jobs', { prompt: 'x' });
  assert.equal(noauth.status, 401);
});

test('DELETE stops a run within one step; a client that goes away cancels its job', async () => {
  const r = await request(w, 'POST', '/v1/jobs', { prompt: 'long', width: 64, height: 64, steps: 150, seed: 2 });
  const { job_id: id } = json(r);
  let deleted = null;
  let after = 0;
  const s = await streamJob(w, id, (ev) => {
    if (ev.type === 'progress' && ev.step === 3 && !deleted) deleted = request(w, 'DELETE', `/v1/jobs/${id}`);
    else if (ev.type === 'progress' && deleted) after++;
  });
  const d = json(await deleted);
  assert.equal(d.cancelled, true);
  assert.ok(after <= 1, `${after} steps ran after DELETE`); // the step in flight may finish
  const end = s.events[s.events.length - 1];
  assert.equal(end.type, 'end');
  assert.equal(end.stop_reason, 'cancelled');
  assert.equal(end.images, 0);
  assert.ok(s.done);
  // disconnect
  const { job_id: id2 } = json(await request(w, 'POST', '/v1/jobs', { prompt: 'long', width: 64, height: 64, steps: 150 }));
  await streamJob(w, id2, (ev) => (ev.type === 'progress' && ev.step === 2 ? 'abort' : undefined));
  let st;
  for (let i = 0; i < 500; i++) {
    st = json(await request(w, 'GET', `/v1/jobs/${id2}`));
    if (st.state === 'done') break;
    await sleep(20);
  }
  assert.equal(st.stop_reason, 'cancelled');
  assert.ok(st.step < 10, `ran to step ${st.step}`);
});

test('metrics move by exactly what was made', async () => {
  const m0 = await metrics(w);
  await job({ prompt: 'count me', width: 64, height: 64, steps: 4, batch_size: 2, seed: 1 });
  const m1 = await metrics(w);
  const d = (k) => (m1[k] ?? 0) - (m0[k] ?? 0);
  assert.equal(d('llorch_sd_images_total'), 2);
  assert.equal(d('llorch_sd_steps_total'), 4);
  assert.equal(d('llorch_sd_image_seconds_count{route="/v1/jobs"}'), 2);
  assert.equal(d('llorch_sd_steps_per_second_count{route="/v1/jobs"}'), 1);
  assert.ok(d('llorch_sd_image_seconds_sum{route="/v1/jobs"}') > 0);
  for (const k of ['llorch_queue_depth', 'llorch_queue_capacity', 'llorch_active_jobs', 'llorch_model_bytes',
    'llorch_rejected_queue_full_total', 'llorch_sd_out_of_memory_total', 'llorch_sd_vae_tiled_retries_total'])
    assert.ok(k in m1, k);
  assert.equal(m1.llorch_queue_capacity, 64);
  assert.ok(m1.llorch_model_bytes > 1e6);
});

test('health, readiness and info', async () => {
  const h = await request({ ...w, headers: {} }, 'GET', '/health');
  assert.equal(h.status, 200);
  assert.equal((await request(w, 'GET', '/v1/ready')).status, 200);
  const info = json(await request(w, 'GET', '/v1/info'));
  assert.equal(info.implementation, 'sd-worker-rbee');
  assert.equal(info.architecture, 'sd1');
  assert.equal(info.model, 'sd15');
  assert.equal(info.max_size, 256);
  assert.equal(info.default_width, 64);
  assert.equal(info.previews, 'latent-rgb');
  const page = await request({ ...w, headers: {} }, 'GET', '/');
  assert.equal(page.status, 200);
  assert.match(page.headers['content-type'], /text\/html/);
});

test('without --model: the bundled default model, the picture rbee txt2img draws with it', async () => {
  const wd = await startWorker(['--local-mode', '--no-warmup']);
  const info = json(await request(wd, 'GET', '/v1/info'));
  assert.equal(info.architecture, 'sd1');
  assert.equal(info.default_width, 128);
  assert.equal(info.default_height, 128);
  const body = { prompt: 'a red circle above a blue square on a yellow background', steps: 20, cfg_scale: 3, seed: 7,
    sampler: 'euler' };
  const r = await request(wd, 'POST', '/v1/jobs', body);
  assert.equal(r.status, 200, r.body);
  const got = (await streamJob(wd, json(r).job_id)).events.find((e) => e.type === 'image').png;
  assert.equal(readPng(pngOf(got)).width, 128);
  const file = path.join(tmp, 'default.png');
  cli(['txt2img', '-p', body.prompt, '--steps', '20', '--cfg', '3', '--seed', '7', '--sampler', 'euler', '-o', file,
    '-q']);
  assert.ok(pngOf(got).equals(fs.readFileSync(file)), 'the worker\'s default model != rbee txt2img\'s');
  assert.equal((await wd.stop()).code, 0);
});

test('heartbeats say implementation "sd-worker-rbee"; --vae swaps the VAE', async () => {
  const beats = [];
  const hive = http.createServer((req, res) => {
    let b = '';
    req.on('data', (c) => { b += c; });
    req.on('end', () => { if (req.url === '/v1/worker-heartbeat') beats.push(JSON.parse(b)); res.end('{}'); });
  });
  await new Promise((r) => hive.listen(0, '127.0.0.1', r));
  const w2 = await startWorker(['--local-mode', '--model', MODEL, '--vae', OTHER_VAE, '--no-warmup', '--hive-url',
    `http://127.0.0.1:${hive.address().port}`, '--heartbeat-interval-ms', '100', '--worker-id', 'sd-1']);
  for (let i = 0; i < 1500 && !beats.some((b) => b.worker.status === 'ready'); i++) await sleep(20);
  const hb = beats.find((b) => b.worker.status === 'ready');
  assert.ok(hb, 'a ready heartbeat');
  assert.equal(hb.worker.implementation, 'sd-worker-rbee');
  assert.equal(hb.worker.id, 'sd-1');
  assert.equal(hb.worker.model_id, 'sd15');
  // the other VAE decodes the same latents differently
  const body = { prompt: 'vae', width: 64, height: 64, steps: 2, seed: 3 };
  const mine = (await job(body)).events.find((e) => e.type === 'image').png;
  const r = await request(w2, 'POST', '/v1/jobs', body);
  const other = (await streamJob(w2, json(r).job_id)).events.find((e) => e.type === 'image').png;
  assert.notEqual(other, mine);
  assert.equal((await w2.stop()).code, 0);
  hive.close();
});

test('a single-file checkpoint (with --config-dir) and its GGUF serve the folder\'s pictures', async () => {
  const body = { prompt: 'a kite', width: 64, height: 64, steps: 3, seed: 21, sampler: 'euler' };
  const want = (await job(body)).events.find((e) => e.type === 'image').png;
  const gguf = path.join(tmp, 'sd15.gguf');
  cli(['convert', MODEL, '-o', gguf, '--type', 'f32', '--quiet']);
  const single = path.join(path.dirname(path.dirname(MODEL)), 'single_file', 'sd15.safetensors');
  for (const args of [['--model', single, '--config-dir', MODEL], ['--model', gguf]]) {
    const w2 = await startWorker(['--local-mode', '--no-warmup', ...args]);
    const r = await request(w2, 'POST', '/v1/jobs', body);
    const got = (await streamJob(w2, json(r).job_id)).events.find((e) => e.type === 'image').png;
    assert.equal(got, want, args.join(' '));
    assert.equal((await w2.stop()).code, 0);
  }
});

test('--taesd: previews are the TAESD decoder\'s full-size pictures', async () => {
  const wt = await startWorker(['--local-mode', '--model', MODEL, '--taesd', path.join(TAESD, 'taesd_decoder.safetensors')]);
  assert.equal(json(await request(wt, 'GET', '/v1/info')).previews, 'taesd');
  const r = await request(wt, 'POST', '/v1/jobs', { prompt: 'a red fox', width: 64, height: 48, steps: 4, seed: 11,
    batch_size: 2, preview_every: 2 });
  const { events, done } = await streamJob(wt, json(r).job_id);
  assert.ok(done);
  const previews = events.filter((e) => e.type === 'progress' && e.preview);
  assert.deepEqual(previews.map((e) => e.step), [2]);
  const p = readPng(pngOf(previews[0].preview));
  assert.deepEqual([p.width, p.height, p.channels], [128, 48, 3]); // the batch side by side, at image size
  // the images themselves do not depend on the previews
  const img = events.find((e) => e.type === 'image').png;
  const plain = await job({ prompt: 'a red fox', width: 64, height: 48, steps: 4, seed: 11, batch_size: 2, preview_every: 2 });
  assert.equal(plain.events.find((e) => e.type === 'image').png, img);
  assert.equal((await wt.stop()).code, 0);
});

test('startup: --taesd, a missing model, a model of another family, --help and the environment', async () => {
  const run = (args, env = {}) => new Promise((resolve) => {
    const p = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolve({ code, out }));
  });
  let r = await run(['--local-mode', '--port', '0', '--model', MODEL, '--taesd', '/some/taesd', '--no-warmup']);
  assert.notEqual(r.code, 0);
  assert.match(r.out, /--taesd: .*\/some\/taesd/);
  r = await run(['--local-mode', '--port', '0', '--model', MODEL, '--taesd', path.join(TAESD, 'taesd16_decoder.safetensors'),
    '--no-warmup']);
  assert.notEqual(r.code, 0);
  assert.match(r.out, /--taesd: .*taesd16_decoder.safetensors decodes 16 latent channels, the model makes 4/);
  r = await run(['--local-mode', '--port', '0'], { RBEE_DEFAULT_SD_MODEL: '/nonexistent/sd-model' });
  assert.notEqual(r.code, 0);
  assert.match(r.out, /no --model given and the bundled default model was not found: RBEE_DEFAULT_SD_MODEL=\/nonexistent\/sd-model does not exist/);
  r = await run(['--local-mode', '--port', '0', '--model', MODEL, '--sd-version', 'xl', '--no-warmup']);
  assert.notEqual(r.code, 0);
  assert.match(r.out, /--sd-version xl expects a sdxl model, but .* is sd1/);
  r = await run(['--local-mode', '--port', '0', '--model', MODEL, '--sd-version', 'v9']);
  assert.match(r.out, /--sd-version must be/);
  r = await run(['--local-mode', '--port', '0', '--model', MODEL, '--vae', '/nonexistent']);
  assert.match(r.out, /--vae: VAE \/nonexistent: not a folder/);
  r = await run(['--help']);
  assert.equal(r.code, 0);
  for (const f of ['--sd-version', '--use-f16', '--vae', '--taesd', '--max-size', '--config-dir', '--queue-depth', '--hive-url',
    '--cuda-device', '--rocm-device', '--local-mode', '--worker-id', '--callback-url', '--backend'])
    assert.ok(r.out.includes(f), f);
  assert.match(r.out, /--max-body-bytes N +request body cap \(default 67108864\)/);
  const w3 = await startWorker(['--local-mode', '--model', MODEL, '--no-warmup'], { RBEE_MAX_SIZE: '128', RBEE_SD_VERSION: 'v1-5' });
  assert.equal(json(await request(w3, 'GET', '/v1/info')).max_size, 128);
  assert.equal((await w3.stop()).code, 0);
});
