# Random-weight GGUF of a real model's shape, for speed measurements beside llama.cpp
# (scripts/peer-gpu.sh): both programs read the same file. Dense llama shapes and two
# mixture-of-experts shapes: Qwen3-30B-A3B (llama.cpp arch qwen3moe: q/k norms, 128 experts,
# attention width 4096 over a 2048 residual) and Mixtral-8x7B (arch llama with
# llama.expert_count), plus tiny versions of each for checks on a CPU.
#
#   python3 make_random_gguf.py OUT.gguf --shape SHAPE [--type F16|Q8_0|Q4_K_M] [--print-size]
#
# F16 (the default, what llama-quantize starts from for the dense shapes) writes matrices in
# f16; Q8_0 writes every matrix as q8_0 (llama-quantize --pure's choice); Q4_K_M writes the
# per-tensor types llama-quantize's Q4_K_M mix picks for the architecture (llama.cpp
# src/llama-quant.cpp at de3ff81): q4_K by default; q6_K for output.weight; q6_K for attn_v
# and ffn_down(_exps) in the layers of its use-more-bits rule (first and last eighth, every
# third between); and with exactly 8 experts (Mixtral) attn_k and attn_v q8_0, attn_output
# q5_K. Norms and the expert router (ffn_gate_inp) are f32 in every type, as llama.cpp's
# converter writes them and its quantizer keeps them. The quantized files are written
# directly (no F16 file first: the MoE shapes' F16 files, 61 and 93 GB, do not fit the GPU
# machine's disk): valid blocks with finite small f16 scales and random bytes elsewhere.
# Speed does not depend on the values, so each type's blocks come from one pool of ~32 MB
# written at a random block offset per tensor, which runs at disk speed.
# Tensors are written in llama-quantize's order (by layer, then by name). The vocabulary is
# SentencePiece-style (tokenizer.ggml.model "llama", byte fallback) for every shape:
# llama.cpp's loader does not tie the tokenizer to the architecture, and a BPE vocabulary
# would need merges. --print-size prints the file's size in bytes and writes nothing.
import argparse, struct, sys, numpy as np

# E embedding, L layers, H / HKV heads, HD head size (default E/H), F feed-forward width,
# V vocabulary, NE experts (0: dense), NU experts per token, FE expert width (default F)
SHAPES = {
  "llama2-7b":      dict(arch="llama", E=4096, L=32, H=32, HKV=32, F=11008, V=32000, theta=1e4),
  "llama3.2-1b":    dict(arch="llama", E=2048, L=16, H=32, HKV=8, F=8192, V=128256, theta=5e5),
  "tinyllama-1.1b": dict(arch="llama", E=2048, L=22, H=32, HKV=4, F=5632, V=32000, theta=1e4),
  "tiny":           dict(arch="llama", E=256, L=2, H=4, HKV=2, F=512, V=1000, theta=1e4),
  "qwen3-30b-a3b":  dict(arch="qwen3moe", E=2048, L=48, H=32, HKV=4, HD=128, F=6144, V=151936, theta=1e6,
                         eps=1e-6, ctx=40960, NE=128, NU=8, FE=768),
  "qwen3moe-tiny":  dict(arch="qwen3moe", E=256, L=4, H=4, HKV=2, HD=128, F=768, V=1000, theta=1e6,
                         eps=1e-6, NE=16, NU=4, FE=256),
  "mixtral-8x7b":   dict(arch="llama", E=4096, L=32, H=32, HKV=8, F=14336, V=32000, theta=1e6, ctx=32768,
                         NE=8, NU=2),
  "mixtral-tiny":   dict(arch="llama", E=256, L=4, H=4, HKV=2, F=512, V=1000, theta=1e6, NE=8, NU=2),
}
# ggml types: id, elements per block, bytes per block
F32, F16, Q8_0, Q4_K, Q5_K, Q6_K = "F32", "F16", "Q8_0", "Q4_K", "Q5_K", "Q6_K"
GGML = {F32: (0, 1, 4), F16: (1, 1, 2), Q8_0: (8, 32, 34), Q4_K: (12, 256, 144), Q5_K: (13, 256, 176),
        Q6_K: (14, 256, 210)}
FILE_TYPE = {"F16": 1, "Q8_0": 7, "Q4_K_M": 15}  # llama_ftype
ALIGN = 32


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(role, layer, c, ftype):
    """The ggml type of one tensor of the file (see the header)."""
    if role in ("norm", "router"):
        return F32
    if ftype == "F16":
        return F16
    if ftype == "Q8_0":
        return Q8_0
    eight = c.get("NE", 0) == 8
    if role == "output":
        return Q6_K
    if role == "k" and eight:
        return Q8_0
    if role == "v":
        return Q8_0 if eight else Q6_K if use_more_bits(layer, c["L"]) else Q4_K
    if role == "o" and eight:
        return Q5_K
    if role == "down" and use_more_bits(layer, c["L"]):
        return Q6_K
    return Q4_K


def tensors(c):
    """(name, ne, role, layer) of every tensor, in ggml's dimension order."""
    E, H, HKV, V = c["E"], c["H"], c["HKV"], c["V"]
    hd = c.get("HD", E // H)
    NE, F = c.get("NE", 0), c["F"]
    FE = c.get("FE", F)
    T = [("token_embd.weight", [E, V], "embd", -1), ("output_norm.weight", [E], "norm", -1),
         ("output.weight", [E, V], "output", -1)]
    for i in range(c["L"]):
        p = f"blk.{i}."
        T += [(p + "attn_norm.weight", [E], "norm", i), (p + "attn_q.weight", [E, H * hd], "q", i),
              (p + "attn_k.weight", [E, HKV * hd], "k", i), (p + "attn_v.weight", [E, HKV * hd], "v", i),
              (p + "attn_output.weight", [H * hd, E], "o", i), (p + "ffn_norm.weight", [E], "norm", i)]
        if c["arch"] == "qwen3moe":
            T += [(p + "attn_q_norm.weight", [hd], "norm", i), (p + "attn_k_norm.weight", [hd], "norm", i)]
        if NE:
            T += [(p + "ffn_gate_inp.weight", [E, NE], "router", i),
                  (p + "ffn_gate_exps.weight", [E, FE, NE], "gate", i),
                  (p + "ffn_up_exps.weight", [E, FE, NE], "up", i),
                  (p + "ffn_down_exps.weight", [FE, E, NE], "down", i)]
        else:
            T += [(p + "ffn_gate.weight", [E, F], "gate", i), (p + "ffn_up.weight", [E, F], "up", i),
                  (p + "ffn_down.weight", [F, E], "down", i)]
    # llama-quantize's order: by layer (-1 first), then by name
    return sorted(T, key=lambda t: (t[3], t[0]))


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(k, t, v, et=None):
    """One metadata pair: t is the GGUF value type (4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array of et)."""
    o = s(k) + struct.pack("<I", t)
    if t == 9:
        o += struct.pack("<IQ", et, len(v))
        if et == 8:
            return o + b"".join(s(x) for x in v)
        return o + np.asarray(v, {6: "<f4", 5: "<i4"}[et]).tobytes()
    return o + {4: lambda: struct.pack("<I", v), 6: lambda: struct.pack("<f", v), 7: lambda: struct.pack("<?", v),
                8: lambda: s(v)}[t]()


def metadata(name, c, ftype):
    a, E, H, V = c["arch"], c["E"], c["H"], c["V"]
    hd = c.get("HD", E // H)
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)] + ["t%d" % i for i in range(V - 259)]
    m = [kv("general.architecture", 8, a), kv("general.name", 8, "random-" + name),
         kv("general.file_type", 4, FILE_TYPE[ftype])]
    if ftype != "F16":
        m.append(kv("general.quantization_version", 4, 2))
    m += [kv(a + ".vocab_size", 4, V), kv(a + ".context_length", 4, c.get("ctx", 4096)),
          kv(a + ".embedding_length", 4, E), kv(a + ".block_count", 4, c["L"]),
          kv(a + ".feed_forward_length", 4, c["F"]), kv(a + ".attention.head_count", 4, H),
          kv(a + ".attention.head_count_kv", 4, c["HKV"]),
          kv(a + ".attention.layer_norm_rms_epsilon", 6, c.get("eps", 1e-5)),
          kv(a + ".rope.dimension_count", 4, hd), kv(a + ".rope.freq_base", 6, c["theta"])]
    if "HD" in c:
        m += [kv(a + ".attention.key_length", 4, hd), kv(a + ".attention.value_length", 4, hd)]
    if c.get("NE"):
        m += [kv(a + ".expert_count", 4, c["NE"]), kv(a + ".expert_used_count", 4, c["NU"])]
        if "FE" in c:
            m.append(kv(a + ".expert_feed_forward_length", 4, c["FE"]))
    m += [kv("tokenizer.ggml.model", 8, "llama"), kv("tokenizer.ggml.tokens", 9, toks, 8),
          kv("tokenizer.ggml.scores", 9, [0.0] * 3 + [-1000.0 - i for i in range(V - 3)], 6),
          kv("tokenizer.ggml.token_type", 9, [2, 3, 3] + [6] * 256 + [1] * (V - 259), 5),
          kv("tokenizer.ggml.bos_token_id", 4, 1), kv("tokenizer.ggml.eos_token_id", 4, 2),
          kv("tokenizer.ggml.unknown_token_id", 4, 0)]
    return m


def nbytes(ty, ne):
    _, blk, bs = GGML[ty]
    if ne[0] % blk:
        sys.exit(f"row length {ne[0]} is not a multiple of {blk} ({ty}): pick another shape")
    return int(np.prod(ne)) // blk * bs


POOL_BYTES = 32 << 20


def f16_scales(rng, n, base):
    """n finite f16 scales in [0.75, 1.25] * base, as raw bytes ([n, 2] uint8)."""
    return (rng.uniform(0.75, 1.25, n) * base).astype("<f2").view(np.uint8).reshape(n, 2)


def make_pool(ty, rng):
    """~32 MB of valid blocks of ty (whole blocks), elements of about 0.02 standard deviation."""
    _, blk, bs = GGML[ty]
    if ty == F16:
        return (rng.standard_normal(POOL_BYTES // 2, dtype=np.float32) * 0.02).astype("<f2").tobytes()
    n = POOL_BYTES // bs
    b = rng.integers(0, 256, size=(n, bs), dtype=np.uint8)
    if ty == Q8_0:    # d, then 32 int8
        b[:, 0:2] = f16_scales(rng, n, 2.7e-4)
    elif ty == Q4_K:  # d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit values
        d = rng.uniform(0.75, 1.25, n) * 1e-4
        b[:, 0:2] = (d.astype("<f2")).view(np.uint8).reshape(n, 2)
        b[:, 2:4] = ((d * 7.5).astype("<f2")).view(np.uint8).reshape(n, 2)  # dmin: mean about zero
    elif ty == Q5_K:  # d, dmin, 12 bytes of scales and mins, 32 bytes of high bits, 128 of low nibbles
        d = rng.uniform(0.75, 1.25, n) * 7e-5
        b[:, 0:2] = (d.astype("<f2")).view(np.uint8).reshape(n, 2)
        b[:, 2:4] = ((d * 15.5).astype("<f2")).view(np.uint8).reshape(n, 2)
    elif ty == Q6_K:  # 128 bytes of low nibbles, 64 of high bits, 16 int8 scales, d
        b[:, 192:208] = rng.integers(-32, 32, size=(n, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = f16_scales(rng, n, 7e-5)
    else:
        raise ValueError(ty)
    return b.tobytes()


def write_from_pool(f, pool, n, bs, rng):
    """n bytes (whole blocks of bs bytes) from pool, starting at a random block."""
    mv = memoryview(pool)
    o = int(rng.integers(0, len(pool) // bs)) * bs
    while n > 0:
        k = min(n, len(pool) - o)
        f.write(mv[o:o + k])
        n -= k
        o = 0


def main():
    ap = argparse.ArgumentParser(description="random-weight GGUF of a real model's shape")
    ap.add_argument("out")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--type", default="F16", choices=sorted(FILE_TYPE))
    ap.add_argument("--print-size", action="store_true", help="print the file's size in bytes, write nothing")
    a = ap.parse_args()
    c = SHAPES[a.shape]
    pad = lambda x: (x + ALIGN - 1) // ALIGN * ALIGN
    T = [(name, ne, tensor_type(role, layer, c, a.type)) for name, ne, role, layer in tensors(c)]
    infos, offs, off = [], [], 0
    for name, ne, ty in T:
        infos.append(s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) +
                     struct.pack("<IQ", GGML[ty][0], off))
        offs.append(off)
        off = pad(off + nbytes(ty, ne))
    meta = metadata(a.shape, c, a.type)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(T), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (pad(len(head)) - len(head))
    if a.print_size:
        print(len(head) + off)
        return
    rng = np.random.default_rng(0)
    pools = {}
    with open(a.out, "wb") as f:
        f.write(head)
        base = f.tell()
        for (name, ne, ty), o in zip(T, offs):
            f.seek(base + o)
            n = int(np.prod(ne))
            if name.endswith("_norm.weight"):
                f.write(np.ones(n, "<f4").tobytes())
            elif ty == F32:
                f.write((rng.standard_normal(n, dtype=np.float32) * 0.02).astype("<f4").tobytes())
            else:
                if ty not in pools:
                    pools[ty] = make_pool(ty, rng)
                write_from_pool(f, pools[ty], nbytes(ty, ne), GGML[ty][2], rng)
        f.truncate(base + off)
    counts = {}
    for _, ne, ty in T:
        counts[ty] = counts.get(ty, 0) + 1
    print("wrote", a.out, a.shape, a.type, "bytes", base + off,
          "tensors", " ".join(f"{k}:{v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
