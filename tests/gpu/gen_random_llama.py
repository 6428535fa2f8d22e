#!/usr/bin/env python3
"""Writes a random-weight Llama model folder (config.json + model.safetensors)
of a real configuration, for the GPU benchmarks on the device machine: the
weights are generated on the GPU (normal * 0.02, norms 1) so nothing large is
ever carried. Usage: gen_random_llama.py {llama2-7b|llama3.2-1b} OUTDIR [dtype]"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

CONFIGS = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0,
                      max_position_embeddings=4096, tie_word_embeddings=False),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0,
                        max_position_embeddings=131072, tie_word_embeddings=True,
                        rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                                          original_max_position_embeddings=8192, rope_type="llama3")),
}


def main():
    name, out = sys.argv[1], sys.argv[2]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[sys.argv[3] if len(sys.argv) > 3 else "bf16"]
    c = dict(CONFIGS[name])
    c.update(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
             torch_dtype="bfloat16" if dtype == torch.bfloat16 else "float16")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    E, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    D = E // c["num_attention_heads"]
    KV = c["num_key_value_heads"] * D
    g = torch.Generator(device="cuda").manual_seed(1234)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32) * 0.02).to(dtype).cpu()

    t = {"model.embed_tokens.weight": rnd(V, E), "model.norm.weight": torch.ones(E, dtype=dtype)}
    if not c["tie_word_embeddings"]:
        t["lm_head.weight"] = rnd(V, E)
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.ones(E, dtype=dtype)
        t[p + "post_attention_layernorm.weight"] = torch.ones(E, dtype=dtype)
        t[p + "self_attn.q_proj.weight"] = rnd(E, E)
        t[p + "self_attn.k_proj.weight"] = rnd(KV, E)
        t[p + "self_attn.v_proj.weight"] = rnd(KV, E)
        t[p + "self_attn.o_proj.weight"] = rnd(E, E)
        t[p + "mlp.gate_proj.weight"] = rnd(F, E)
        t[p + "mlp.up_proj.weight"] = rnd(F, E)
        t[p + "mlp.down_proj.weight"] = rnd(E, F)
    save_file(t, os.path.join(out, "model.safetensors"))
    n = sum(v.numel() for v in t.values())
    print(f"{name}: {n / 1e9:.2f} B parameters written to {out}")


if __name__ == "__main__":
    main()
