#!/usr/bin/env python3
"""Independent float64 reference logits for the llama.cpp fixture tiny-f32.gguf.

A naive pure-Python (no dependencies) Llama forward pass over the GGUF's F32
weights for the fixture's 32 tokens, in double precision with an exact KV
cache. llama.cpp's own logits for that file were computed with an f16 KV cache
and flash attention accumulating values in f16, which puts them about 7e-4
(relative L2) away from exact arithmetic; this file is the exact reference
that rbee's f32 path is held to.

usage: llamacpp_f64_logits.py FIXTURE_DIR OUT.f32   (writes 32 x 259 float32)
"""
import array
import math
import operator
import struct
import sys

TOKENS = [1, 72, 101, 108, 108, 111, 35, 119, 111, 114, 108, 100, 3, 200, 150, 66,
          67, 68, 255, 258, 100, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]


def read_gguf(path):
    f = open(path, 'rb').read()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, f, pos)
        pos += struct.calcsize(fmt)
        return v

    def rstr():
        nonlocal pos
        (n,) = rd('<Q')
        s = f[pos:pos + n]
        pos += n
        return s.decode('utf8', 'replace')

    scalar = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            at, n = rd('<IQ')
            return [rval(at) for _ in range(n)]
        return rd('<' + scalar[t])[0]

    _, _ = rd('<4sI')
    nt, nkv = rd('<QQ')
    kv = {}
    for _ in range(nkv):
        k = rstr()
        (t,) = rd('<I')
        kv[k] = rval(t)
    infos = []
    for _ in range(nt):
        name = rstr()
        (nd,) = rd('<I')
        ne = rd('<' + 'Q' * nd)
        ty, off = rd('<IQ')
        assert ty == 0, 'F32 tensors only'
        infos.append((name, ne, off))
    align = kv.get('general.alignment', 32)
    base = (pos + align - 1) // align * align
    w = {}
    for name, ne, off in infos:
        cnt = 1
        for x in ne:
            cnt *= x
        a = array.array('f')
        a.frombytes(f[base + off:base + off + 4 * cnt])
        w[name] = (ne, a)
    return kv, w


def main():
    kv, W = read_gguf(sys.argv[1] + '/tiny-f32.gguf')
    E = kv['llama.embedding_length']
    H = kv['llama.attention.head_count']
    HKV = kv['llama.attention.head_count_kv']
    D = E // H
    eps = kv['llama.attention.layer_norm_rms_epsilon']
    base = kv['llama.rope.freq_base']
    L = kv['llama.block_count']

    def mv(name, x):
        ne, a = W[name]
        K, N = ne[0], ne[1]
        return [math.fsum(map(operator.mul, a[n * K:(n + 1) * K], x)) for n in range(N)]

    def rms(x, name):
        w = W[name][1]
        r = 1 / math.sqrt(math.fsum(v * v for v in x) / len(x) + eps)
        return [x[i] * r * w[i] for i in range(len(x))]

    theta = [base ** (-2 * i / D) for i in range(D // 2)]

    def rope(v, p):  # GGUF llama layout: adjacent pairs (q/k stored permuted)
        out = list(v)
        for h in range(len(v) // D):
            for i in range(D // 2):
                c, s = math.cos(p * theta[i]), math.sin(p * theta[i])
                a, b = v[h * D + 2 * i], v[h * D + 2 * i + 1]
                out[h * D + 2 * i] = a * c - b * s
                out[h * D + 2 * i + 1] = a * s + b * c
        return out

    K = [[] for _ in range(L)]
    V = [[] for _ in range(L)]
    out = array.array('f')
    for p, t in enumerate(TOKENS):
        ne, emb = W['token_embd.weight']
        x = list(emb[t * E:(t + 1) * E])
        for l in range(L):
            h = rms(x, f'blk.{l}.attn_norm.weight')
            q = rope(mv(f'blk.{l}.attn_q.weight', h), p)
            K[l].append(rope(mv(f'blk.{l}.attn_k.weight', h), p))
            V[l].append(mv(f'blk.{l}.attn_v.weight', h))
            att = []
            for hq in range(H):
                g = hq // (H // HKV)
                qh = q[hq * D:(hq + 1) * D]
                s = [math.fsum(map(operator.mul, qh, K[l][j][g * D:(g + 1) * D])) / math.sqrt(D)
                     for j in range(p + 1)]
                m = max(s)
                e = [math.exp(z - m) for z in s]
                tot = math.fsum(e)
                att += [math.fsum(e[j] * V[l][j][g * D + d] for j in range(p + 1)) / tot for d in range(D)]
            o = mv(f'blk.{l}.attn_output.weight', att)
            x = [x[i] + o[i] for i in range(E)]
            h = rms(x, f'blk.{l}.ffn_norm.weight')
            g_ = mv(f'blk.{l}.ffn_gate.weight', h)
            u = mv(f'blk.{l}.ffn_up.weight', h)
            a = [g_[i] / (1 + math.exp(-g_[i])) * u[i] for i in range(len(g_))]
            d = mv(f'blk.{l}.ffn_down.weight', a)
            x = [x[i] + d[i] for i in range(E)]
        h = rms(x, 'output_norm.weight')
        out.extend(mv('output.weight', h))
    with open(sys.argv[2], 'wb') as fo:
        out.tofile(fo)


if __name__ == '__main__':
    main()
