// The LLM worker's chat page: the conversation is kept here and sent whole
// to /v1/chat/completions with stream: true; the answer is read from the
// server-sent events as it arrives. The API token the user types is kept in
// this browser (localStorage) and sent as a bearer token with every call.
'use strict';

const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;

$('token').value = localStorage.getItem('rbee-token') || '';
$('token').addEventListener('change', () => { localStorage.setItem('rbee-token', $('token').value); loadInfo(); });

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const t = $('token').value.trim();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function status(text, isError = false) {
  $('status').textContent = text;
  $('status').className = isError ? 'status error' : 'status';
}

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.dataset.role = role;
  div.textContent = text;
  $('messages').appendChild(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j.error) return j.error.message || j.error.code;
    if (j.errors) return j.errors.map((e) => e.message).join('; ');
  } catch { /* not JSON */ }
  return `HTTP ${res.status}`;
}

async function loadInfo() {
  try {
    const res = await fetch('/v1/info', { headers: headers() });
    if (res.status === 401) { status('This worker needs its API token (top right).', true); return; }
    const info = await res.json();
    $('model').textContent = `${info.model} · ${info.backend}${info.state ? ' · ' + info.state : ''}`;
    status('');
  } catch (e) { status(String(e), true); }
}

function body() {
  const messages = [];
  const sys = $('system').value.trim();
  if (sys) messages.push({ role: 'system', content: sys });
  messages.push(...history);
  const b = { messages, stream: true, temperature: Number($('temperature').value), top_p: Number($('top_p').value),
    max_tokens: Number($('max_tokens').value) };
  if ($('seed').value !== '') b.seed = Number($('seed').value);
  return b;
}

// Reads an SSE body, calling onEvent with each parsed data payload.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!block.startsWith('data: ')) continue; // comments (keep-alives)
      const data = block.slice(6);
      if (data === '[DONE]') return;
      onEvent(JSON.parse(data));
    }
  }
}

async function send() {
  const text = $('input').value;
  if (!text.trim() || controller) return;
  $('input').value = '';
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  const out = addMessage('assistant', '');
  controller = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  status('generating…');
  let answer = '';
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body()),
      signal: controller.signal });
    if (!res.ok) throw new Error(await errorText(res));
    let finish = null;
    await readEvents(res, (ev) => {
      if (ev.error) throw new Error(ev.error.message);
      const c = ev.choices && ev.choices[0];
      if (!c) return;
      if (c.delta && c.delta.content) { answer += c.delta.content; out.textContent = answer; }
      if (c.finish_reason) finish = c.finish_reason;
    });
    history.push({ role: 'assistant', content: answer });
    status(finish === 'length' ? 'stopped at max tokens' : 'done');
    out.dataset.done = '1';
  } catch (e) {
    if (e.name === 'AbortError') { status('stopped'); history.push({ role: 'assistant', content: answer }); }
    else { status(String(e.message || e), true); out.remove(); history.pop(); }
  } finally {
    controller = null;
    $('send').disabled = false;
    $('stop').disabled = true;
  }
}

$('send').addEventListener('click', send);
$('stop').addEventListener('click', () => controller && controller.abort());
$('clear').addEventListener('click', () => { history.length = 0; $('messages').textContent = ''; status(''); });
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); }
});
loadInfo();
