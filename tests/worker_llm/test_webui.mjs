// The LLM worker's built-in page in headless Chromium (Debian's chromium,
// driven by playwright-core): the page and its files are public while the
// API needs the token; typing the token and a message streams an answer
// into the page, and with temperature 0 that answer is the text the API
// gives the same conversation; --no-webui leaves the page out. Screenshots
// go to the build directory.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, test } from 'node:test';
import { chromium } from 'playwright-core';
import { killAll, request, startWorker } from './worker_harness.mjs';

after(killAll);

const CHROMIUM = process.env.RBEE_CHROMIUM || '/usr/bin/chromium';
const TOKEN = `tok-web-${process.pid}`;

async function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

test('the chat page streams an answer with the token the user typed', { timeout: 120000 }, async () => {
  const w = await startWorker(['--local-mode', '--parallel', '2'], { LLORCH_API_TOKEN: TOKEN });
  const noauth = { url: w.url, headers: {} };
  const page0 = await request(noauth, 'GET', '/');
  assert.equal(page0.status, 200, 'the page needs no token');
  assert.match(page0.headers['content-type'], /text\/html/);
  assert.equal((await request(noauth, 'GET', '/chat.js')).status, 200);
  assert.equal((await request(noauth, 'GET', '/style.css')).status, 200);
  assert.equal((await request(noauth, 'GET', '/v1/info')).status, 401, 'the API still needs it');

  // what the API answers for the conversation the page will send
  const ref = await request(w, 'POST', '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'And God said' }], temperature: 0, top_p: 0.95, max_tokens: 24,
  });
  const expected = JSON.parse(ref.body).choices[0].message.content;
  assert.ok(expected.length > 0);

  const browser = await launch();
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(w.url + '/');
    await page.waitForSelector('#status.error'); // no token yet: the page says so
    await page.fill('#token', TOKEN);
    await page.dispatchEvent('#token', 'change');
    await page.waitForFunction(() => document.getElementById('model').textContent.includes('rbee-default'));
    await page.fill('#temperature', '0');
    await page.fill('#max_tokens', '24');
    await page.fill('#input', 'And God said');
    await page.click('#send');
    await page.waitForSelector('.msg.assistant[data-done="1"]', { timeout: 60000 });
    const got = await page.textContent('.msg.assistant');
    assert.equal(got, expected, 'the streamed answer equals the API answer');
    assert.equal(await page.textContent('.msg.user'), 'And God said');
    await page.screenshot({ path: 'webui-llm-chat.png', fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
  assert.equal((await w.stop()).code, 0);
});

test('--no-webui serves no page', async () => {
  const w = await startWorker(['--local-mode', '--no-webui']);
  assert.equal((await request(w, 'GET', '/')).status, 404);
  assert.equal((await w.stop()).code, 0);
});

test('the screenshot was written', () => {
  assert.ok(fs.statSync('webui-llm-chat.png').size > 1000);
});
