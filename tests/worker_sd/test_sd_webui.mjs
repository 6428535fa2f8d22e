// The SD worker's built-in page (src/worker_sd/web) in headless Chromium
// (Debian's chromium, driven by playwright-core), against the real
// sd-worker-rbee on the tiny sd15 fixture pipeline with auth on: the page
// and its files are public while the API needs the token; the form gets
// its sampler list and the model's defaults from the worker; typing the
// token and a prompt streams a preview after every step but the last into
// the page (each a PNG at 1/8 of the size) and a progress bar, and the final image
// in the gallery is byte for byte the PNG the API gives the same request
// and seed; its download is that PNG with the infotext in its parameters
// chunk. Cancel stops a long run within a step; a bad size shows the
// worker's own error; --no-webui leaves the page out. Screenshots of a run
// in progress and of the result go to the build directory. Without the
// fixtures: skipped (tests/common/with_fixture.sh) unless CI=true.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';
import { killAll, request, startWorker } from './worker_harness.mjs';
import { MODEL, json, readPng, streamJob } from './sd_harness.mjs';

after(killAll);
const CHROMIUM = process.env.RBEE_CHROMIUM || '/usr/bin/chromium';
const TOKEN = `tok-sd-web-${process.pid}`;
let w;
let browser;
before(async () => {
  w = await startWorker(['--model', MODEL, '--max-size', '256', '--bind', '127.0.0.1'], { LLORCH_API_TOKEN: TOKEN });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});
after(async () => { if (browser) await browser.close(); });

// A page with the token typed in and the worker's lists loaded; errors collects page errors.
async function openPage(errors) {
  const page = await browser.newPage({ acceptDownloads: true });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(w.url + '/');
  await page.fill('#token', TOKEN);
  await page.dispatchEvent('#token', 'change');
  await page.waitForFunction(() => document.getElementById('sampler').options.length > 0);
  return page;
}

async function fillForm(page, f) {
  await page.fill('#prompt', f.prompt);
  await page.fill('#negative', f.negative_prompt);
  await page.fill('#width', String(f.width));
  await page.fill('#height', String(f.height));
  await page.fill('#steps', String(f.steps));
  await page.fill('#cfg', String(f.cfg_scale));
  await page.selectOption('#sampler', f.sampler);
  await page.selectOption('#scheduler', f.scheduler);
  await page.fill('#seed', String(f.seed));
  await page.fill('#batch', '1');
}

test('the page is public, the API is not', async () => {
  const noauth = { url: w.url, headers: {} };
  const page = await request(noauth, 'GET', '/');
  assert.equal(page.status, 200, 'the page needs no token');
  assert.match(page.headers['content-type'], /text\/html/);
  assert.match(page.body, /<script src="\/sd.js">/);
  const js = await request(noauth, 'GET', '/sd.js');
  assert.equal(js.status, 200);
  assert.match(js.headers['content-type'], /javascript/);
  assert.equal((await request(noauth, 'GET', '/style.css')).status, 200);
  for (const p of ['/v1/info', '/sdapi/v1/samplers']) assert.equal((await request(noauth, 'GET', p)).status, 401, p);
  assert.equal((await request(noauth, 'POST', '/v1/jobs', { prompt: 'x' })).status, 401);
});

test('a prompt streams previews, then the image the API gives for the same seed', { timeout: 180000 }, async () => {
  const info = json(await request(w, 'GET', '/v1/info'));
  const samplers = json(await request(w, 'GET', '/sdapi/v1/samplers')).map((s) => s.name);
  const schedulers = json(await request(w, 'GET', '/sdapi/v1/schedulers')).map((s) => s.name);
  const errors = [];
  const page = await browser.newPage({ acceptDownloads: true });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(w.url + '/');
  await page.waitForSelector('#status[data-state="error"]'); // no token yet: the page says so
  assert.match(await page.textContent('#status'), /API token/);
  await page.fill('#token', TOKEN);
  await page.dispatchEvent('#token', 'change');
  await page.waitForFunction((m) => document.getElementById('model').textContent.startsWith(m), info.model);
  // the worker's lists and the model's defaults
  assert.deepEqual(await page.$$eval('#sampler option', (os) => os.map((o) => o.value)), samplers);
  assert.deepEqual(await page.$$eval('#scheduler option', (os) => os.map((o) => o.value)), schedulers);
  assert.equal(await page.inputValue('#sampler'), 'Euler'); // info.default_sampler "euler"
  assert.equal(info.default_sampler, 'euler');
  assert.equal(await page.inputValue('#width'), String(info.default_width));
  assert.equal(await page.inputValue('#height'), String(info.default_height));
  assert.equal(await page.inputValue('#steps'), String(info.default_steps));

  const form = { prompt: 'a lighthouse in a storm', negative_prompt: 'blurry', width: 128, height: 96, steps: 14,
    cfg_scale: 6, sampler: 'DPM++ 2M', scheduler: 'karras', seed: 1234 };
  await fillForm(page, form);
  await page.click('#generate');
  // mid-run: a preview shown, the bar part-way
  await page.waitForFunction(() => {
    const p = document.getElementById('preview');
    const bar = document.getElementById('bar');
    return Number(p.dataset.previews) >= 2 && !document.getElementById('stage').hidden && bar.value < bar.max;
  }, null, { timeout: 120000, polling: 10 });
  const mid = await page.evaluate(() => ({ src: document.getElementById('preview').src,
    value: document.getElementById('bar').value, max: document.getElementById('bar').max }));
  await page.screenshot({ path: 'webui-sd-progress.png', fullPage: true });
  assert.equal(mid.max, form.steps);
  const preview = readPng(Buffer.from(mid.src.replace(/^data:image\/png;base64,/, ''), 'base64'));
  assert.deepEqual([preview.width, preview.height], [form.width / 8, form.height / 8]);

  await page.waitForSelector('#status[data-state="done"]', { timeout: 120000 });
  await page.screenshot({ path: 'webui-sd-result.png', fullPage: true });
  // a preview after every step but the last, which the image itself follows
  assert.equal(await page.getAttribute('#preview', 'data-previews'), String(form.steps - 1));
  assert.equal(await page.$$eval('#bar', ([b]) => [b.value, b.max].join('/')), `${form.steps}/${form.steps}`);
  assert.match(await page.textContent('#status'), /done: 1 image\(s\), seed 1234/);
  assert.equal(await page.locator('.result').count(), 1);
  assert.equal(await page.getAttribute('.result', 'data-seed'), '1234');
  const shown = Buffer.from(await page.evaluate(async () => {
    const r = await fetch(document.querySelector('.result img').src);
    return Array.from(new Uint8Array(await r.arrayBuffer()));
  }));

  // the same request through the API
  const r = await request(w, 'POST', '/v1/jobs', { ...form, batch_size: 1 });
  assert.equal(r.status, 200, r.body);
  const { events } = await streamJob(w, json(r).job_id);
  const images = events.filter((e) => e.type === 'image');
  assert.equal(images.length, 1);
  const ref = Buffer.from(images[0].png, 'base64');
  assert.ok(shown.equals(ref), 'the page shows the PNG the API gives for the same request');
  const infotext = readPng(ref).texts.parameters;
  assert.equal(infotext, images[0].infotext);
  assert.match(infotext, /^a lighthouse in a storm\nNegative prompt: blurry\nSteps: 14, .*Seed: 1234, Size: 128x96/);
  assert.equal(await page.textContent('.result .infotext'), infotext);

  // the download is that PNG, metadata included
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('.result a.download')]);
  assert.equal(download.suggestedFilename(), 'rbee-sd-1234-0.png');
  const saved = fs.readFileSync(await download.path());
  assert.ok(saved.equals(ref), 'the downloaded file is the API PNG');
  assert.equal(readPng(saved).texts.parameters, infotext);
  // "Seed 1234" puts the seed back in the form
  await page.fill('#seed', '');
  await page.click('.result button');
  assert.equal(await page.inputValue('#seed'), '1234');
  assert.deepEqual(errors, []);
  await page.close();
});

test('cancel stops a long run within a step', { timeout: 180000 }, async () => {
  const errors = [];
  const page = await openPage(errors);
  const before = await page.locator('.result').count();
  await fillForm(page, { prompt: 'a long run', negative_prompt: '', width: 128, height: 128, steps: 150, cfg_scale: 7,
    sampler: 'Euler', scheduler: 'automatic', seed: 5 });
  await page.click('#generate');
  await page.waitForFunction(() => document.getElementById('bar').value >= 2, null, { timeout: 120000, polling: 10 });
  await page.click('#cancel');
  await page.waitForSelector('#status[data-state="cancelled"]', { timeout: 60000 });
  const id = await page.getAttribute('#status', 'data-job');
  const st = json(await request(w, 'GET', `/v1/jobs/${id}`));
  assert.equal(st.result.stop_reason, 'cancelled', JSON.stringify(st));
  assert.equal(st.result.images, 0);
  assert.ok(await page.$eval('#bar', (b) => b.value < 150), 'stopped before the last step');
  assert.equal(await page.locator('.result').count(), before, 'no image from a cancelled run');
  assert.equal(await page.isEnabled('#generate'), true);
  assert.equal(await page.isDisabled('#cancel'), true);
  assert.deepEqual(errors, []);
  await page.close();
});

test('bad input shows the worker\'s error', { timeout: 60000 }, async () => {
  const errors = [];
  const page = await openPage(errors);
  await page.fill('#prompt', 'x');
  await page.fill('#width', '60');
  await page.click('#generate');
  await page.waitForSelector('#status[data-state="error"]');
  assert.match(await page.textContent('#status'), /width must be a multiple of 8, got 60/);
  assert.equal(await page.isEnabled('#generate'), true);
  assert.deepEqual(errors, []);
  await page.close();
});

test('--no-webui serves no page', async () => {
  const w2 = await startWorker(['--local-mode', '--model', MODEL, '--no-warmup', '--no-webui']);
  for (const p of ['/', '/sd.js', '/style.css']) assert.equal((await request(w2, 'GET', p)).status, 404, p);
  assert.equal((await w2.stop()).code, 0);
});

test('the screenshots were written', () => {
  for (const f of ['webui-sd-progress.png', 'webui-sd-result.png']) assert.ok(fs.statSync(f).size > 1000, f);
});
