// The SD worker's page: the form becomes an rbee job (POST /v1/jobs), whose
// event stream (GET /v1/jobs/{id}/stream, read with fetch so the token can
// go along) drives the progress bar, the live preview (the `preview` PNG
// that progress events carry) and the gallery (one `image` event per image:
// the PNG exactly as the worker made it, infotext chunk included, so a
// download keeps its metadata). Cancel is DELETE /v1/jobs/{id}. The sampler
// and schedule lists and the model's defaults come from the worker
// (/sdapi/v1/samplers, /sdapi/v1/schedulers, /v1/info). The API token the
// user types is kept in this browser (localStorage) and sent as a bearer
// token with every call.
'use strict';

const $ = (id) => document.getElementById(id);
let job = null; // {id, controller} while a generation runs
let defaultsSet = false;
const urls = []; // blob URLs of the gallery, revoked on clear

$('token').value = localStorage.getItem('rbee-token') || '';
$('token').addEventListener('change', () => { localStorage.setItem('rbee-token', $('token').value); loadInfo(); });

function headers(json = true) {
  const h = json ? { 'Content-Type': 'application/json' } : {};
  const t = $('token').value.trim();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

// state: idle | running | done | cancelled | error (also on #status for scripts and tests)
function status(text, state = null) {
  $('status').textContent = text;
  $('status').className = state === 'error' ? 'status error' : 'status';
  if (state) $('status').dataset.state = state;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j.errors) return j.errors.map((e) => e.message).join('; ');
    if (j.error) return j.error.message || j.error.code;
    if (j.detail) return String(j.detail);
  } catch { /* not JSON */ }
  return `HTTP ${res.status}`;
}

async function getJson(path) {
  const res = await fetch(path, { headers: headers(false) });
  if (res.status === 401) throw new Error('This worker needs its API token (top right).');
  if (!res.ok) throw new Error(await errorText(res));
  return res.json();
}

function fillSelect(sel, items, wanted) {
  const keep = sel.value;
  sel.textContent = '';
  for (const it of items) {
    const o = document.createElement('option');
    o.value = it.value;
    o.textContent = it.label;
    sel.appendChild(o);
  }
  const pick = items.find((it) => it.value === keep) || items.find(wanted) || items[0];
  if (pick) sel.value = pick.value;
}

// "euler_a" -> the list's "Euler a" (by its k_ alias or its name in snake case)
const samplerMatches = (name, s) =>
  (s.aliases || []).includes(`k_${name}`) || s.name.toLowerCase().replace(/[^a-z0-9]+/g, '_') === name;

async function loadInfo() {
  try {
    const info = await getJson('/v1/info');
    const [samplers, schedulers] = await Promise.all([getJson('/sdapi/v1/samplers'), getJson('/sdapi/v1/schedulers')]);
    $('model').textContent = `${info.model} · ${info.architecture || 'sd'} · ${info.dtype || 'f32'} · ${info.device || info.backend}`;
    fillSelect($('sampler'), samplers.map((s) => ({ value: s.name, label: s.name })),
      (it) => samplerMatches(info.default_sampler || 'euler', samplers.find((s) => s.name === it.value)));
    fillSelect($('scheduler'), schedulers.map((s) => ({ value: s.name, label: s.label || s.name })),
      (it) => it.value === 'automatic');
    if (!defaultsSet) { // the model's own defaults, once; the user's values after that
      if (info.default_width) $('width').value = info.default_width;
      if (info.default_height) $('height').value = info.default_height;
      if (info.default_steps) $('steps').value = info.default_steps;
      defaultsSet = true;
    }
    for (const id of ['width', 'height']) if (info.max_size) $(id).max = info.max_size;
    status('', 'idle');
  } catch (e) { status(String(e.message || e), 'error'); }
}

function request() {
  const num = (id) => Number($(id).value);
  return {
    prompt: $('prompt').value, negative_prompt: $('negative').value, width: num('width'), height: num('height'),
    steps: num('steps'), cfg_scale: num('cfg'), sampler: $('sampler').value, scheduler: $('scheduler').value,
    seed: $('seed').value === '' ? -1 : num('seed'), batch_size: num('batch'),
    preview_every: 1, // a small latent preview after every step
  };
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

function showPreview(b64, width, height) {
  const img = $('preview');
  img.src = `data:image/png;base64,${b64}`;
  const scale = Math.min(1, 384 / Math.max(width, height));
  img.style.width = `${Math.round(width * scale)}px`;
  img.style.height = `${Math.round(height * scale)}px`;
  img.dataset.previews = String(Number(img.dataset.previews || 0) + 1);
  $('stage').hidden = false;
}

function addImage(ev, jobId) {
  const bytes = Uint8Array.from(atob(ev.png), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([bytes], { type: 'image/png' }));
  urls.push(url);
  const fig = document.createElement('figure');
  fig.className = 'result';
  fig.dataset.seed = String(ev.seed);
  fig.dataset.index = String(ev.index);
  fig.dataset.job = jobId;
  const img = document.createElement('img');
  img.src = url;
  img.alt = `image ${ev.index + 1}, seed ${ev.seed}`;
  const cap = document.createElement('figcaption');
  const a = document.createElement('a');
  a.className = 'download';
  a.href = url;
  a.download = `rbee-sd-${ev.seed}-${ev.index}.png`;
  a.textContent = 'Download PNG';
  const seed = document.createElement('button');
  seed.className = 'secondary small';
  seed.textContent = `Seed ${ev.seed}`;
  seed.title = 'use this seed';
  seed.addEventListener('click', () => { $('seed').value = String(ev.seed); });
  const info = document.createElement('pre');
  info.className = 'infotext';
  info.textContent = ev.infotext || '';
  cap.append(a, ' ', seed, info);
  fig.append(img, cap);
  $('gallery').prepend(fig);
}

function secs(ms) { return ms >= 10000 ? `${Math.round(ms / 1000)} s` : `${(ms / 1000).toFixed(1)} s`; }

async function generate() {
  if (job) return;
  const body = request();
  const controller = new AbortController();
  job = { id: null, controller };
  $('generate').disabled = true;
  $('cancel').disabled = false;
  $('bar').value = 0;
  $('preview').dataset.previews = '0';
  $('stage').hidden = true;
  status('submitting…', 'running');
  let final = null;
  try {
    const res = await fetch('/v1/jobs', { method: 'POST', headers: headers(), body: JSON.stringify(body),
      signal: controller.signal });
    if (!res.ok) throw new Error(await errorText(res));
    const created = await res.json();
    job.id = created.job_id;
    $('status').dataset.job = created.job_id;
    const stream = await fetch(created.sse_url, { headers: headers(false), signal: controller.signal });
    if (!stream.ok) throw new Error(await errorText(stream));
    const t0 = performance.now();
    await readEvents(stream, (ev) => {
      switch (ev.type) {
      case 'queued': status(`queued (position ${ev.position})`, 'running'); break;
      case 'started': status(`generating · seed ${ev.seed}`, 'running'); break;
      case 'progress':
        $('bar').max = ev.total;
        $('bar').value = ev.step;
        status(`step ${ev.step} of ${ev.total}${ev.step < ev.total ? ` · about ${secs(ev.eta_ms)} left` : ''}`, 'running');
        if (ev.preview) showPreview(ev.preview, body.width, body.height);
        break;
      case 'image': addImage(ev, created.job_id); break;
      case 'end': case 'error': final = ev; break;
      default: break;
      }
    });
    if (!final) throw new Error('the event stream ended early');
    if (final.type === 'error') throw new Error(final.message || final.code);
    const took = secs(final.time_ms ?? performance.now() - t0);
    if (final.stop_reason === 'cancelled') status(`cancelled after ${took} (${final.images} image(s))`, 'cancelled');
    else status(`done: ${final.images} image(s), seed ${final.seed}, ${took}`, 'done');
    $('stage').hidden = true;
  } catch (e) {
    if (e.name === 'AbortError') status('cancelled', 'cancelled'); // cancelled before the job existed
    else status(String(e.message || e), 'error');
  } finally {
    job = null;
    $('generate').disabled = false;
    $('cancel').disabled = true;
  }
}

async function cancel() {
  if (!job || !job.id) { if (job) job.controller.abort(); return; }
  $('cancel').disabled = true;
  status('cancelling…', 'running');
  try {
    const res = await fetch(`/v1/jobs/${job.id}`, { method: 'DELETE', headers: headers(false) });
    if (!res.ok) throw new Error(await errorText(res));
  } catch (e) { status(String(e.message || e), 'error'); }
}

$('generate').addEventListener('click', generate);
$('cancel').addEventListener('click', cancel);
$('clear').addEventListener('click', () => {
  for (const u of urls.splice(0)) URL.revokeObjectURL(u);
  $('gallery').textContent = '';
});
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); generate(); }
});
loadInfo();
