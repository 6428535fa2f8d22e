// Shared by the SD worker's Node tests: where the fixtures are, a PNG
// reader that checks the file (signature, chunk CRCs, IHDR, the inflated
// image data's size and row filters) and returns its text chunks, a small
// RGBA PNG writer (for OpenAI masks), an incremental SSE reader of the
// rbee job stream, and JSON requests. node built-ins only.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';

export const FIXTURES = process.env.RBEE_FIXTURES_DIR;
if (!FIXTURES) throw new Error('RBEE_FIXTURES_DIR is not set');
export const MODEL = path.join(FIXTURES, 'diffusers/pipelines/sd15');
export const REFS = path.join(FIXTURES, 'diffusers/refs/sd15');
export const OTHER_VAE = path.join(FIXTURES, 'diffusers/pipelines/sdxl/vae');
export const CLI = process.env.RBEE_CLI;

const CRC_TABLE = new Uint32Array(256).map((_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// Reads a PNG completely; throws on anything malformed. Returns
// {width, height, channels, texts: {key: text}, rows: Buffer (filtered)}.
export function readPng(buf) {
  if (!Buffer.isBuffer(buf)) buf = Buffer.from(buf);
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (buf.length < 8 || !buf.subarray(0, 8).equals(sig)) throw new Error('not a PNG signature');
  let pos = 8;
  let hdr = null;
  const idat = [];
  const texts = {};
  let ended = false;
  while (pos < buf.length) {
    const len = buf.readUInt32BE(pos);
    const type = buf.toString('latin1', pos + 4, pos + 8);
    const body = buf.subarray(pos + 8, pos + 8 + len);
    const crc = buf.readUInt32BE(pos + 8 + len);
    if (crc !== crc32(buf.subarray(pos + 4, pos + 8 + len))) throw new Error(`bad CRC in ${type}`);
    pos += 12 + len;
    if (type === 'IHDR') hdr = { width: body.readUInt32BE(0), height: body.readUInt32BE(4), depth: body[8], ctype: body[9], interlace: body[12] };
    else if (type === 'IDAT') idat.push(body);
    else if (type === 'tEXt') {
      const z = body.indexOf(0);
      texts[body.toString('latin1', 0, z)] = body.toString('latin1', z + 1);
    } else if (type === 'iTXt') {
      const z = body.indexOf(0);
      const key = body.toString('latin1', 0, z);
      const comp = body[z + 1];
      let rest = body.subarray(z + 3);
      rest = rest.subarray(rest.indexOf(0) + 1);
      rest = rest.subarray(rest.indexOf(0) + 1);
      texts[key] = (comp ? zlib.inflateSync(rest) : rest).toString('utf8');
    } else if (type === 'IEND') { ended = true; break; }
  }
  if (!hdr || !ended) throw new Error('PNG without IHDR or IEND');
  const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[hdr.ctype];
  if (hdr.depth !== 8 || !channels || hdr.interlace) throw new Error('unexpected PNG layout');
  const rows = zlib.inflateSync(Buffer.concat(idat));
  if (rows.length !== hdr.height * (1 + hdr.width * channels)) throw new Error('image data of the wrong size');
  for (let y = 0; y < hdr.height; y++) if (rows[y * (1 + hdr.width * channels)] > 4) throw new Error('bad row filter');
  return { width: hdr.width, height: hdr.height, channels, texts, rows };
}

// An 8-bit RGBA PNG of w x h from pixel(x, y) -> [r, g, b, a].
export function writePng(w, h, pixel) {
  const raw = Buffer.alloc(h * (1 + 4 * w));
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) Buffer.from(pixel(x, y)).copy(raw, y * (1 + 4 * w) + 1 + 4 * x);
  const chunk = (type, body) => {
    const out = Buffer.alloc(12 + body.length);
    out.writeUInt32BE(body.length, 0);
    out.write(type, 4, 'latin1');
    body.copy(out, 8);
    out.writeUInt32BE(crc32(out.subarray(4, 8 + body.length)), 8 + body.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 6;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

export const b64 = (file) => fs.readFileSync(file).toString('base64');

// Streams /v1/jobs/{id}/stream. onEvent(ev) sees each JSON event as it
// arrives (return 'abort' to close the connection). Resolves
// {events, done, aborted}; checks the framing like parseSse.
export function streamJob(w, id, onEvent = () => {}) {
  return new Promise((resolve, reject) => {
    const events = [];
    let buf = '';
    let done = false;
    let aborted = false;
    const req = http.get(`${w.url}/v1/jobs/${id}/stream`, { headers: w.headers, agent: false }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`stream status ${res.statusCode}`));
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (block.startsWith(':')) continue; // keep-alive
          if (!block.startsWith('data: ') || block.includes('\n')) return reject(new Error(`malformed event ${block}`));
          const payload = block.slice(6);
          if (done) return reject(new Error('data after [DONE]'));
          if (payload === '[DONE]') { done = true; continue; }
          const ev = JSON.parse(payload);
          events.push(ev);
          if (onEvent(ev) === 'abort') { aborted = true; req.destroy(); resolve({ events, done, aborted }); return; }
        }
      });
      res.on('end', () => { if (!aborted) resolve({ events, done, aborted }); });
      res.on('error', (e) => { if (!aborted) reject(e); });
    });
    req.on('error', (e) => { if (!aborted) reject(e); });
  });
}

export const json = (r) => JSON.parse(r.body);
