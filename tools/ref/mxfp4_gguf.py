# MXFP4 (ggml's definition) and a minimal GGUF v3 writer, for the gpt-oss
# reference: gen_tiny_models.py quantizes the tiny model's expert weights to
# MXFP4 here, writes a GGUF with llama.cpp's gpt-oss tensor names and keys
# (experts MXFP4, everything else f32), and runs transformers once more with
# the dequantized expert weights, so the C test can check (1) its MXFP4
# decoder against these dequantized values exactly, (2) its quantizer against
# these blocks byte for byte, and (3) the GGUF's logits against both the f32
# model (a stated bound) and the dequantized model (tighter).
#
# MXFP4 as ggml defines it (block_mxfp4, 17 bytes per 32 values):
#   e       one byte, an E8M0 exponent; the block's scale is d = 2^(e - 128)
#           (ggml's "half" E8M0: twice the value of the plain 2^(e - 127) scale,
#           because the value table below is doubled)
#   qs[16]  value j < 16 in the low nibble of qs[j], value j + 16 in the high one;
#           a nibble indexes KVALUES = {0,1,2,3,4,6,8,12, 0,-1,-2,-3,-4,-6,-8,-12}
#           (the E2M1 values 0, .5, 1, 1.5, 2, 3, 4, 6 doubled, sign in bit 3)
#   decode  x = KVALUES[nibble] * d (exact in f32)
#   encode  amax = max |x| over the block (f32); e = floor(log2f(amax)) - 2 + 127
#           (0 when amax is 0; clamped to 0..255 here where ggml's cast would be
#           undefined, which random weights never reach); each value takes the
#           first index i minimizing |KVALUES[i] * d - x| computed in f32.
import struct

import numpy as np

KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
QK = 32
BLOCK_BYTES = 17
GGML_TYPE_F32 = 0
GGML_TYPE_MXFP4 = 39


def e8m0_half(e):
    """2^(e - 128) as float32 (denormal for e < 2), for an array of uint8."""
    return np.ldexp(np.float32(1.0), e.astype(np.int32) - 128).astype(np.float32)


def quantize(x):
    """x: float32 array whose last dim is a multiple of 32 -> uint8 blocks (..., n/32 * 17)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    lead = x.shape[:-1]
    n = x.shape[-1]
    assert n % QK == 0
    b = x.reshape(-1, QK)
    amax = np.abs(b).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):
        lg = np.log2(amax.astype(np.float64)).astype(np.float32)   # log2f: correctly rounded log2
    e = np.where(amax > 0, np.floor(lg) - 2 + 127, 0)
    e = np.clip(e, 0, 255).astype(np.uint8)
    d = e8m0_half(e)
    cand = (KVALUES[None, None, :] * d[:, None, None]).astype(np.float32)       # exact
    err = np.abs((cand - b[:, :, None]).astype(np.float32))
    q = np.argmin(err, axis=2).astype(np.uint8)                                   # first minimum wins
    out = np.empty((b.shape[0], BLOCK_BYTES), dtype=np.uint8)
    out[:, 0] = e
    out[:, 1:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(*lead, (n // QK) * BLOCK_BYTES)


def dequantize(blocks, n):
    """uint8 blocks (..., n/32 * 17) -> float32 (..., n)."""
    lead = blocks.shape[:-1]
    b = blocks.reshape(-1, BLOCK_BYTES)
    d = e8m0_half(b[:, 0])
    lo = KVALUES[b[:, 1:] & 0x0F]
    hi = KVALUES[b[:, 1:] >> 4]
    vals = np.concatenate([lo, hi], axis=1) * d[:, None]
    return vals.astype(np.float32).reshape(*lead, n)


# ---- GGUF v3 ----
_U32, _F32, _BOOL, _STR = 4, 6, 7, 8


def _s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, value) with int -> u32, float -> f32, bool, str.
    tensors: list of (name, ggml_type, ne (ggml order, ne[0] innermost), raw bytes)."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, v in kvs:
        out += _s(k)
        if isinstance(v, bool):
            out += struct.pack("<IB", _BOOL, int(v))
        elif isinstance(v, int):
            out += struct.pack("<II", _U32, v)
        elif isinstance(v, float):
            out += struct.pack("<If", _F32, v)
        elif isinstance(v, str):
            out += struct.pack("<I", _STR) + _s(v)
        else:
            raise TypeError(f"{k}: {type(v)}")
    offs, off = [], 0
    for name, ty, ne, raw in tensors:
        offs.append(off)
        off += (len(raw) + alignment - 1) // alignment * alignment
    for (name, ty, ne, raw), o in zip(tensors, offs):
        out += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", int(x)) for x in ne)
        out += struct.pack("<IQ", ty, o)
    out += b"\0" * ((-len(out)) % alignment)
    for name, ty, ne, raw in tensors:
        out += raw
        out += b"\0" * ((-len(raw)) % alignment)
    with open(path, "wb") as f:
        f.write(out)


def f32_tensor(name, arr):
    """An f32 GGUF tensor from a numpy array in torch order (outermost first)."""
    a = np.ascontiguousarray(arr, dtype="<f4")
    return (name, GGML_TYPE_F32, list(reversed(a.shape)), a.tobytes())


def gpt_oss_gguf(path, model, cfg):
    """Writes model (a GptOssForCausalLM in float32/float64) as a llama.cpp-style
    gpt-oss GGUF: expert matrices MXFP4, every other tensor f32. Returns
    {tensor name: (blocks uint8 array, row length)} of the MXFP4 tensors and
    the dequantized expert weights in the model's own layout, for the caller
    to run transformers with."""
    sd = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    E, I, H = cfg.num_local_experts, cfg.intermediate_size, cfg.hidden_size
    tensors, mx, deq = [], {}, {}
    tensors.append(f32_tensor("token_embd.weight", sd["model.embed_tokens.weight"]))
    for il in range(cfg.num_hidden_layers):
        p = f"model.layers.{il}."
        g = f"blk.{il}."
        tensors.append(f32_tensor(g + "attn_norm.weight", sd[p + "input_layernorm.weight"]))
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            tensors.append(f32_tensor(g + gg + ".weight", sd[p + f"self_attn.{hf}.weight"]))
            if p + f"self_attn.{hf}.bias" in sd:
                tensors.append(f32_tensor(g + gg + ".bias", sd[p + f"self_attn.{hf}.bias"]))
        tensors.append(f32_tensor(g + "attn_sinks.weight", sd[p + "self_attn.sinks"]))
        tensors.append(f32_tensor(g + "post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"]))
        tensors.append(f32_tensor(g + "ffn_gate_inp.weight", sd[p + "mlp.router.weight"]))
        tensors.append(f32_tensor(g + "ffn_gate_inp.bias", sd[p + "mlp.router.bias"]))
        gu = sd[p + "mlp.experts.gate_up_proj"]            # [E, H, 2I]: x @ gu[e], gate = even columns
        gub = sd[p + "mlp.experts.gate_up_proj_bias"]      # [E, 2I]
        dn = sd[p + "mlp.experts.down_proj"]               # [E, I, H]
        dnb = sd[p + "mlp.experts.down_proj_bias"]         # [E, H]
        assert gu.shape == (E, H, 2 * I) and dn.shape == (E, I, H), (gu.shape, dn.shape)
        mats = {"ffn_gate_exps": gu[:, :, 0::2].transpose(0, 2, 1),   # [E, I, H]: rows of H
                "ffn_up_exps": gu[:, :, 1::2].transpose(0, 2, 1),
                "ffn_down_exps": dn.transpose(0, 2, 1)}                # [E, H, I]: rows of I
        dq = {}
        for gg, w in mats.items():
            w32 = np.ascontiguousarray(w, dtype=np.float32)
            blk = quantize(w32)
            mx[g + gg + ".weight"] = (blk, w32.shape[-1])
            dq[gg] = dequantize(blk, w32.shape[-1])
            tensors.append((g + gg + ".weight", GGML_TYPE_MXFP4, [w32.shape[2], w32.shape[1], w32.shape[0]],
                            blk.tobytes()))
        tensors.append(f32_tensor(g + "ffn_gate_exps.bias", gub[:, 0::2]))
        tensors.append(f32_tensor(g + "ffn_up_exps.bias", gub[:, 1::2]))
        tensors.append(f32_tensor(g + "ffn_down_exps.bias", dnb))
        gu_deq = np.empty((E, H, 2 * I), dtype=np.float32)
        gu_deq[:, :, 0::2] = dq["ffn_gate_exps"].transpose(0, 2, 1)
        gu_deq[:, :, 1::2] = dq["ffn_up_exps"].transpose(0, 2, 1)
        deq[p + "mlp.experts.gate_up_proj"] = gu_deq
        deq[p + "mlp.experts.down_proj"] = np.ascontiguousarray(dq["ffn_down_exps"].transpose(0, 2, 1))
    tensors.append(f32_tensor("output_norm.weight", sd["model.norm.weight"]))
    if not cfg.tie_word_embeddings:
        tensors.append(f32_tensor("output.weight", sd["lm_head.weight"]))
    rp = cfg.rope_parameters if isinstance(getattr(cfg, "rope_parameters", None), dict) else (cfg.rope_scaling or {})
    a = "gpt-oss"
    kvs = [("general.architecture", a), ("general.name", "gpt_oss-mxfp4"), ("general.file_type", 38),
           ("general.quantization_version", 2),
           (f"{a}.vocab_size", cfg.vocab_size), (f"{a}.context_length", cfg.max_position_embeddings),
           (f"{a}.embedding_length", H), (f"{a}.block_count", cfg.num_hidden_layers),
           (f"{a}.feed_forward_length", I), (f"{a}.expert_feed_forward_length", I),
           (f"{a}.expert_count", E), (f"{a}.expert_used_count", cfg.num_experts_per_tok),
           (f"{a}.attention.head_count", cfg.num_attention_heads),
           (f"{a}.attention.head_count_kv", cfg.num_key_value_heads),
           (f"{a}.attention.key_length", cfg.head_dim), (f"{a}.attention.value_length", cfg.head_dim),
           (f"{a}.attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps)),
           (f"{a}.attention.sliding_window", cfg.sliding_window),
           (f"{a}.rope.dimension_count", cfg.head_dim),
           (f"{a}.rope.freq_base", float(rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))),
           (f"{a}.rope.scaling.type", "yarn"), (f"{a}.rope.scaling.factor", float(rp["factor"])),
           (f"{a}.rope.scaling.original_context_length", int(rp["original_max_position_embeddings"])),
           (f"{a}.rope.scaling.yarn_beta_fast", float(rp.get("beta_fast") or 32.0)),
           (f"{a}.rope.scaling.yarn_beta_slow", float(rp.get("beta_slow") or 1.0))]
    write_gguf(path, kvs, tensors)
    return mx, deq
