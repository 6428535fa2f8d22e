# Random-weight llama-architecture GGUF (F16) of a real model's shape, for speed measurements beside
# llama.cpp (scripts/peer-gpu.sh): both programs read the same file. From the project leads' tools
# (../shared/tools/make_big_gguf.py). Usage: python3 make_random_gguf.py OUT.gguf --shape llama2-7b|llama3.2-1b|tinyllama-1.1b|tiny
import argparse, struct, numpy as np
SHAPES = {
  "llama2-7b":   dict(E=4096, L=32, H=32, HKV=32, F=11008, V=32000, theta=10000.0),
  "llama3.2-1b": dict(E=2048, L=16, H=32, HKV=8,  F=8192,  V=128256, theta=500000.0),
  "tinyllama-1.1b": dict(E=2048, L=22, H=32, HKV=4, F=5632, V=32000, theta=10000.0),
  "tiny":        dict(E=256,  L=2,  H=4,  HKV=2,  F=512,   V=1000,  theta=10000.0),
}
ALIGN = 32
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
def kv(k, t, v, et=None):
    o = s(k) + struct.pack("<I", t)
    if t == 9:
        o += struct.pack("<IQ", et, len(v))
        if et == 8: o += b"".join(s(x) for x in v)
        elif et == 6: o += np.asarray(v, "<f4").tobytes()
        elif et == 5: o += np.asarray(v, "<i4").tobytes()
        return o
    return o + ({4: struct.pack("<I", v) if t == 4 else b"", 6: struct.pack("<f", v) if t == 6 else b"",
                 7: struct.pack("<?", v) if t == 7 else b"", 8: s(v) if t == 8 else b""}[t])
ap = argparse.ArgumentParser(); ap.add_argument("out"); ap.add_argument("--shape", default="tiny"); a = ap.parse_args()
c = SHAPES[a.shape]; E, L, H, HKV, F, V = c["E"], c["L"], c["H"], c["HKV"], c["F"], c["V"]; hd = E // H
toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)] + ["t%d" % i for i in range(V - 259)]
types = [2, 3, 3] + [6] * 256 + [1] * (V - 259)
meta = [kv("general.architecture", 8, "llama"), kv("general.name", 8, "random-" + a.shape), kv("general.file_type", 4, 1),
        kv("llama.vocab_size", 4, V), kv("llama.context_length", 4, 4096), kv("llama.embedding_length", 4, E),
        kv("llama.block_count", 4, L), kv("llama.feed_forward_length", 4, F), kv("llama.attention.head_count", 4, H),
        kv("llama.attention.head_count_kv", 4, HKV), kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
        kv("llama.rope.dimension_count", 4, hd), kv("llama.rope.freq_base", 6, c["theta"]),
        kv("tokenizer.ggml.model", 8, "llama"), kv("tokenizer.ggml.tokens", 9, toks, 8),
        kv("tokenizer.ggml.scores", 9, [0.0] * 3 + [-1000.0 - i for i in range(V - 3)], 6),
        kv("tokenizer.ggml.token_type", 9, types, 5), kv("tokenizer.ggml.bos_token_id", 4, 1),
        kv("tokenizer.ggml.eos_token_id", 4, 2), kv("tokenizer.ggml.unknown_token_id", 4, 0)]
T = [("token_embd.weight", [E, V], 1)]
for i in range(L):
    p = f"blk.{i}."
    T += [(p+"attn_norm.weight", [E], 0), (p+"attn_q.weight", [E, E], 1), (p+"attn_k.weight", [E, hd*HKV], 1),
          (p+"attn_v.weight", [E, hd*HKV], 1), (p+"attn_output.weight", [E, E], 1), (p+"ffn_norm.weight", [E], 0),
          (p+"ffn_gate.weight", [E, F], 1), (p+"ffn_up.weight", [E, F], 1), (p+"ffn_down.weight", [F, E], 1)]
T += [("output_norm.weight", [E], 0), ("output.weight", [E, V], 1)]
pad = lambda n: (n + ALIGN - 1) // ALIGN * ALIGN
infos, off, offs = [], 0, []
for name, dims, f16 in T:
    n = int(np.prod(dims)); nb = n * (2 if f16 else 4)
    infos.append(s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", 1 if f16 else 0, off))
    offs.append(off); off = pad(off + nb)
head = b"GGUF" + struct.pack("<IQQ", 3, len(T), len(meta)) + b"".join(meta) + b"".join(infos)
head += b"\0" * (pad(len(head)) - len(head))
rng = np.random.default_rng(0)
with open(a.out, "wb") as f:
    f.write(head); base = f.tell()
    for (name, dims, f16), o in zip(T, offs):
        f.seek(base + o); n = int(np.prod(dims))
        if f16:
            for k in range(0, n, 1 << 24):
                f.write(rng.standard_normal(min(1 << 24, n - k), dtype=np.float32).__imul__(0.02).astype("<f2").tobytes())
        else: f.write(np.ones(n, "<f4").tobytes())
    f.truncate(base + off)
print("wrote", a.out, a.shape, "bytes", base + off)
