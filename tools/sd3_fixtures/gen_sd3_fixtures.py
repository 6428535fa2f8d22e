#!/usr/bin/env python3
"""Reference data for rbee's SD3 support, made with diffusers, transformers, tokenizers and sentencepiece.

Runs on the GPU machine (which has torch, transformers, tokenizers and sentencepiece; diffusers comes from
the shared source tarball). It reuses the leads' fixture generator (../shared/fixtures/diffusers/
gen_fixtures.py, imported, not copied) and adds to it:
  * a T5 Unigram tokenizer built for the test: sentencepiece trains a unigram model (T5's special ids:
    <pad>=0, </s>=1, <unk>=2) on a corpus of English text; transformers converts it to a tokenizer.json as it
    does for T5 (precompiled nmt_nfkc charsmap, Metaspace, "$A </s>"); `t5tok/cases.json` holds test strings
    with the ids from sentencepiece, from the `tokenizers` library and from transformers;
  * two tiny SD3 pipelines: "sd3" (SD3-medium layout) and "sd35" (SD3.5-medium layout: RMS qk-norm and a
    second, image-only attention in the first layer); their T5 ids are the tokenizer's, so the folders carry
    tokenizer_3 and work end to end; weights are rounded to f16 and stored in f16 (the f32 references are
    computed from exactly those values);
  * extra runs: without T5 (zeros, as diffusers does when text_encoder_3 is None), img2img (flow matching)
    and a single-file checkpoint in the original SD3 layout (model.diffusion_model.*, text_encoders.*,
    first_stage_model.*) checked by diffusers' from_single_file;
  * optionally (--speed) diffusers' fp16 speed at SD3-medium's real shapes (random weights).

Usage: PYTHONPATH=<diffusers>/src python3 gen_sd3_fixtures.py --gen <gen_fixtures.py> --out OUT
           --tok <folder with CLIP vocab.json + merges.txt> --corpus <folder of text/python files>
           [--speed] [--speed-budget S]
"""
import argparse
import glob
import importlib.util
import json
import os
import shutil
import sys
import time

T5_VOCAB = 1000
T5_MAX_LEN = 24
SD3_SCHED = dict(num_train_timesteps=1000, shift=3.0)

TOK_CASES = [
    "a photo of a cat", "A Photo Of A CAT!", "  leading and  double   spaces ", "tabs\tand\nnewlines",
    "hello, world. It's 3:45pm; isn't it?", "naïve café résumé", "ＦＵＬＬ ｗｉｄｔｈ ｌｅｔｔｅｒｓ １２３",
    "ﬁne ligatures ﬀ", "emoji 🐝 and symbols © ® ™ ½", "日本語のテキスト", "", " ", "x",
    "unbelievably-long_hyphenated/word.with.dots", "pipeline.transformer(hidden_states, timestep)",
    "The quick brown fox jumps over the lazy dog", "e\u0301 combining accent", "non\u00a0breaking space",
    "zero\u200bwidth", "<pad> </s> <unk> as text",
]
# strings with characters the training corpus does not have (unknown pieces), checked with a given model
EXTRA_CASES = ["snowman \u2603 and \u2708 plane", "\u03a9\u2248\u00e7\u221a\u222b math", "\u1e9e capital sharp s",
               "\u3000ideographic space", "tab\t\ttwo", "\u2603\u2603\u2603 three unknowns"]


def load_gen(path):
    spec = importlib.util.spec_from_file_location("gen_fixtures", path)
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    return g


def build_corpus(src, dst):
    n = 0
    with open(dst, "w", encoding="utf-8") as out:
        for p in sorted(glob.glob(os.path.join(src, "**", "*"), recursive=True)):
            if not os.path.isfile(p) or not p.endswith((".py", ".md", ".txt", ".rst")):
                continue
            try:
                txt = open(p, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            for line in txt.splitlines():
                line = line.strip().strip("#").strip()
                if 8 <= len(line) <= 2000:
                    out.write(line + "\n")
                    n += 1
            if n > 200000:
                break
        for s in TOK_CASES:
            out.write(s + "\n")
    return n


def make_t5_tokenizer(g, out, corpus_dir, spm_model=None):
    """sentencepiece unigram model (trained, or the one given) + its tokenizer.json; cases with ids from
    sentencepiece, the tokenizers library and transformers."""
    import sentencepiece as spm
    d = os.path.join(out, "t5tok")
    os.makedirs(d, exist_ok=True)
    if spm_model:
        shutil.copyfile(spm_model, os.path.join(d, "spiece.model"))
        return finish_t5_tokenizer(g, d, spm)
    corpus = os.path.join(out, "_corpus.txt")
    n = build_corpus(corpus_dir, corpus)
    g.log(f"t5tok: corpus {n} lines")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "spiece"), vocab_size=T5_VOCAB,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, normalization_rule_name="nmt_nfkc",
                                   input_sentence_size=200000, shuffle_input_sentence=True, seed_sentencepiece_size=100000,
                                   num_threads=8)
    os.remove(corpus)
    return finish_t5_tokenizer(g, d, spm)


def finish_t5_tokenizer(g, d, spm):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "spiece.model"))
    import transformers
    hf = os.path.join(d, "hf")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import spm_to_tokenizer_json
    sys.argv[1:] = [os.path.join(d, "spiece.model"), hf]
    spm_to_tokenizer_json.main()
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    import tokenizers
    tj = os.path.join(hf, "tokenizer.json")
    tk = tokenizers.Tokenizer.from_file(tj)
    cases = []
    for s in TOK_CASES + EXTRA_CASES:
        a = sp.encode(s) + [1]
        b = tk.encode(s).ids
        c = tok(s).input_ids
        cases.append(dict(text=s, sentencepiece=a, tokenizers=b, transformers=c, agree=(a == b == c),
                          pieces=sp.encode(s, out_type=str)))
    g.jdump(dict(vocab_size=sp.get_piece_size(), tokenizer_class=type(tok).__name__,
                 versions=dict(sentencepiece=spm.__version__, tokenizers=tokenizers.__version__,
                               transformers=transformers.__version__),
                 how="sentencepiece: sp.encode(text) + [1 (</s>)]; tokenizers: Tokenizer.from_file(hf/tokenizer.json)"
                     ".encode(text).ids; transformers: tokenizer(text).input_ids",
                 cases=cases), os.path.join(d, "cases.json"))
    g.log("t5tok: " + ", ".join(f"{c['text'][:12]!r}={'ok' if c['agree'] else 'DIFF'}" for c in cases))
    return sp, tok


def add_pipelines(g, sp):
    te_l = g.te_cfg(8, 20, 2, 2, "quick_gelu", proj=8)
    te_g = g.te_cfg(12, 24, 2, 2, "gelu", proj=12)
    t5 = dict(vocab_size=T5_VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
              relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
              layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False,
              pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, tie_word_embeddings=False)
    vae = g.vae_cfg(1.5305, latent=16, extra=dict(shift_factor=0.0609, use_quant_conv=False,
                                                   use_post_quant_conv=False))
    tr = dict(sample_size=8, patch_size=2, in_channels=16, num_layers=2, attention_head_dim=8, num_attention_heads=4,
              joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=20, out_channels=16,
              pos_embed_max_size=12)
    prompts = dict(prompt="a red apple on a wooden table, studio light", negative_prompt="blurry",
                   long_prompt=("a very long prompt " * 12) + "that goes past seventy seven tokens of clip " * 3)
    base = dict(kind="sd3", pipeline="StableDiffusion3Pipeline", vae_seed=602, text_encoder_seed=603,
                text_encoder_2_seed=604, text_encoder_3_seed=605, tokenizer_pad="<|endoftext|>",
                tokenizer_2_pad="!", scheduler=dict(cls="FlowMatchEulerDiscreteScheduler", cfg=SD3_SCHED),
                size=(64, 64), nonsquare=(64, 96), schedulers=["flow_euler"], img2img=[], inpaint=None,
                t5_max_len=T5_MAX_LEN, **prompts)
    g.PIPELINES["sd3"] = dict(base, set="sd3", transformer=tr, transformer_seed=601, vae=vae, text_encoder=te_l,
                              text_encoder_2=te_g, text_encoder_3=t5, seed=1600, gen_seed=2600)
    tr35 = dict(tr, num_layers=3, qk_norm="rms_norm", dual_attention_layers=(0,))
    g.PIPELINES["sd35"] = dict(base, set="sd3", transformer=tr35, transformer_seed=701, vae="share:sd3",
                               text_encoder="share:sd3", text_encoder_2="share:sd3", text_encoder_3=t5,
                               seed=1700, gen_seed=2700, prompt="a lighthouse at night, oil painting",
                               negative_prompt="")
    g.SET_ORDER["sd3"] = ["sd3", "sd35"]
    for name in ("sd3", "sd35"):
        P = g.PIPELINES[name]
        # as T5's tokenizer truncates: the text's ids cut to max_len - 1, then </s>
        P["t5_ids"] = {s: sp.encode(s)[:T5_MAX_LEN - 1] + [1]
                       for s in (P["prompt"], P["negative_prompt"], P["long_prompt"])}


def round_f16(g):
    """Components get f16-representable weights; saved folders store them in f16 (refs stay exact)."""
    orig_build, orig_save = g.build_components, g.save_pipeline
    torch = g.E.torch

    def build(name, built, tokroot):
        comp = orig_build(name, built, tokroot)
        for k, v in comp.items():
            if isinstance(v, torch.nn.Module):
                with torch.no_grad():
                    for p in v.parameters():
                        p.copy_(p.to(torch.float16).to(torch.float32))
                    for b in v.buffers():
                        if b.is_floating_point():
                            b.copy_(b.to(torch.float16).to(torch.float32))
        return comp

    def save(pipe, name, pdir, tokroot):
        orig_save(pipe, name, pdir, tokroot)
        st = g.E.st
        for p in glob.glob(os.path.join(pdir, "**", "*.safetensors"), recursive=True):
            t = st.load_file(p)
            t = {k: (v.to(torch.float16) if v.is_floating_point() else v) for k, v in t.items()}
            st.save_file(t, p, metadata={"format": "pt"})
        # tokenizer_3: the test tokenizer, so the folder works end to end
        tdir = os.path.join(pdir, "tokenizer_3")
        shutil.copytree(os.path.join(OUT, "t5tok", "hf"), tdir, dirs_exist_ok=True)
        shutil.copyfile(os.path.join(OUT, "t5tok", "spiece.model"), os.path.join(tdir, "spiece.model"))
        mi = os.path.join(pdir, "model_index.json")
        m = json.load(open(mi))
        m["tokenizer_3"] = ["transformers", TOK_CLASS]
        json.dump(m, open(mi, "w"), indent=2)

    g.build_components, g.save_pipeline = build, save


def extra_runs(g, name, pdir, rdir):
    """No-T5 run, img2img run, and a check that the folder's own tokenizer_3 gives the refs' embeddings."""
    E = g.E
    torch = E.torch
    P = g.PIPELINES[name]
    meta_p = os.path.join(rdir, "meta.json")
    meta = json.load(open(meta_p))
    pipe = g.load_pipeline(name, pdir)
    base_cfg = dict(pipe.scheduler.config)
    h, w = P["size"]
    f = pipe.vae_scale_factor
    lc = pipe.vae.config.latent_channels
    common = dict(prompt=P["prompt"], negative_prompt=P["negative_prompt"], num_inference_steps=g.STEPS,
                  guidance_scale=g.CFG, height=h, width=w, max_sequence_length=P["t5_max_len"])
    comps = dict(pipe.components)
    comps["text_encoder_3"], comps["tokenizer_3"] = None, None
    p0 = E.StableDiffusion3Pipeline(**comps)
    p0.set_progress_bar_config(disable=True)
    r = g.guarded(f"{name}: no-T5 run")(g.run_and_record)(
        p0, name, "txt2img_flow_euler_no_t5", rdir, common, "flow_euler", base_cfg, (1, lc, h // f, w // f),
        P["seed"], P["gen_seed"] + 80, note="text_encoder_3=None: the T5 part of the context is zeros")
    if r:
        meta["runs"].append(r[0])
    init_img = E.Image.open(os.path.join(rdir, "init_image.png")) if os.path.exists(
        os.path.join(rdir, "init_image.png")) else E.Image.fromarray(g.test_image_array(h, w, 0))
    init_img.save(os.path.join(rdir, "init_image.png"))
    i2i = E.diffusers.StableDiffusion3Img2ImgPipeline(**pipe.components)
    i2i.set_progress_bar_config(disable=True)
    g.patch_t5(i2i, name)
    c = {k: v for k, v in common.items() if k not in ("height", "width")}
    c.update(image=init_img, strength=0.6, num_inference_steps=5)
    pre = i2i.image_processor.preprocess(init_img)
    r = g.guarded(f"{name}: img2img")(g.run_and_record)(
        i2i, name, "img2img_flow_euler", rdir, c, "flow_euler", base_cfg, gen_seed=P["gen_seed"] + 100,
        extra_in={"init_image": pre},
        note="init_image.png, strength 0.6, num_inference_steps 5 (3 denoising steps); the generator draws the "
             "VAE posterior sample first, then the noise (see rng_draws)")
    if r:
        meta["runs"].append(r[0])

    def tok_check():
        full = E.StableDiffusion3Pipeline.from_pretrained(pdir, torch_dtype=torch.float32, local_files_only=True)
        T = E.st.load_file(os.path.join(rdir, "text.safetensors"))
        pe, ne, pp, npp = full.encode_prompt(P["prompt"], None, None, device="cpu", do_classifier_free_guidance=True,
                                             negative_prompt=P["negative_prompt"],
                                             max_sequence_length=P["t5_max_len"])
        d = dict(prompt_embeds=float((pe - T["prompt_embeds"]).abs().max()),
                 negative_prompt_embeds=float((ne - T["negative_prompt_embeds"]).abs().max()),
                 tokenizer_3=type(full.tokenizer_3).__name__)
        g.log(f"{name}: folder with its own tokenizer_3 vs refs: {d}")
        return d
    meta["tokenizer_3_check"] = g.guarded(f"{name}: tokenizer_3 check")(tok_check)()
    for v in meta.get("text", {}).get("t5", {}).values():
        v["note"] = "tokenizer_3 (spiece.model) ids: the text's pieces cut to max_len - 1, then </s> (1), then pad 0"
    g.jdump(meta, meta_p)


def swap_halves(t):
    a, b = t.chunk(2, dim=0)
    return E_torch().cat([b, a], dim=0)


def E_torch():
    import torch
    return torch


def sd3_transformer_to_original(sd, num_layers):
    """diffusers SD3Transformer2DModel names -> the original MMDiT names (the inverse of diffusers' converter)."""
    torch = E_torch()
    o = {"pos_embed": sd["pos_embed.pos_embed"], "x_embedder.proj.weight": sd["pos_embed.proj.weight"],
         "x_embedder.proj.bias": sd["pos_embed.proj.bias"], "context_embedder.weight": sd["context_embedder.weight"],
         "context_embedder.bias": sd["context_embedder.bias"]}
    for a, b in (("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"),
                 ("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"),
                 ("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"),
                 ("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"),
                 ("final_layer.linear", "proj_out")):
        for s in ("weight", "bias"):
            o[f"{a}.{s}"] = sd[f"{b}.{s}"]
    for s in ("weight", "bias"):
        o[f"final_layer.adaLN_modulation.1.{s}"] = swap_halves(sd[f"norm_out.linear.{s}"])
    for i in range(num_layers):
        tb, jb = f"transformer_blocks.{i}", f"joint_blocks.{i}"
        last = i == num_layers - 1
        for s in ("weight", "bias"):
            o[f"{jb}.x_block.attn.qkv.{s}"] = torch.cat([sd[f"{tb}.attn.to_{x}.{s}"] for x in "qkv"])
            o[f"{jb}.context_block.attn.qkv.{s}"] = torch.cat([sd[f"{tb}.attn.add_{x}_proj.{s}"] for x in "qkv"])
            o[f"{jb}.x_block.attn.proj.{s}"] = sd[f"{tb}.attn.to_out.0.{s}"]
            o[f"{jb}.x_block.adaLN_modulation.1.{s}"] = sd[f"{tb}.norm1.linear.{s}"]
            ctx = sd[f"{tb}.norm1_context.linear.{s}"]
            o[f"{jb}.context_block.adaLN_modulation.1.{s}"] = swap_halves(ctx) if last else ctx
            o[f"{jb}.x_block.mlp.fc1.{s}"] = sd[f"{tb}.ff.net.0.proj.{s}"]
            o[f"{jb}.x_block.mlp.fc2.{s}"] = sd[f"{tb}.ff.net.2.{s}"]
            if not last:
                o[f"{jb}.context_block.attn.proj.{s}"] = sd[f"{tb}.attn.to_add_out.{s}"]
                o[f"{jb}.context_block.mlp.fc1.{s}"] = sd[f"{tb}.ff_context.net.0.proj.{s}"]
                o[f"{jb}.context_block.mlp.fc2.{s}"] = sd[f"{tb}.ff_context.net.2.{s}"]
            if f"{tb}.attn2.to_q.{s}" in sd:
                o[f"{jb}.x_block.attn2.qkv.{s}"] = torch.cat([sd[f"{tb}.attn2.to_{x}.{s}"] for x in "qkv"])
                o[f"{jb}.x_block.attn2.proj.{s}"] = sd[f"{tb}.attn2.to_out.0.{s}"]
        for a, b in (("x_block.attn.ln_q", "attn.norm_q"), ("x_block.attn.ln_k", "attn.norm_k"),
                     ("context_block.attn.ln_q", "attn.norm_added_q"), ("context_block.attn.ln_k", "attn.norm_added_k"),
                     ("x_block.attn2.ln_q", "attn2.norm_q"), ("x_block.attn2.ln_k", "attn2.norm_k")):
            if f"{tb}.{b}.weight" in sd:
                o[f"{jb}.{a}.weight"] = sd[f"{tb}.{b}.weight"]
    return o


def single_file(g, name, pdir, out_path, scripts):
    E = g.E
    torch = E.torch
    lf = E.st.load_file
    spec = importlib.util.spec_from_file_location(
        "conv_sd", os.path.join(scripts, "convert_diffusers_to_original_stable_diffusion.py"))
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    tcfg = json.load(open(os.path.join(pdir, "transformer", "config.json")))
    tsd = lf(os.path.join(pdir, "transformer", "diffusion_pytorch_model.safetensors"))
    orig = sd3_transformer_to_original(tsd, tcfg["num_layers"])
    n_in = sum(1 for k in tsd)
    n_out = len(orig)
    sd = {"model.diffusion_model." + k: v for k, v in orig.items()}
    vae = conv.convert_vae_state_dict(lf(os.path.join(pdir, "vae", "diffusion_pytorch_model.safetensors")))
    sd.update({"first_stage_model." + k: v for k, v in vae.items()})
    for te, key in (("text_encoder", "clip_l"), ("text_encoder_2", "clip_g")):
        for k, v in lf(os.path.join(pdir, te, "model.safetensors")).items():
            sd[f"text_encoders.{key}.transformer." + g.clip_text_model_key(k)
               if not k.startswith("text_projection") else f"text_encoders.{key}.transformer.{k}"] = v
    for k, v in lf(os.path.join(pdir, "text_encoder_3", "model.safetensors")).items():
        sd["text_encoders.t5xxl.transformer." + k] = v
    sd = {k: v.contiguous() for k, v in sd.items()}
    E.st.save_file(sd, out_path)
    info = dict(n_tensors=len(sd), transformer_in=n_in, transformer_out=n_out)
    ref = g.load_pipeline(name, pdir)

    def cmp(mod, a_sd):
        b = getattr(ref, mod).state_dict()
        bad = [k for k in b if k not in a_sd or not torch.equal(a_sd[k].float(), b[k].float())]
        return dict(n=len(b), n_mismatched=len(bad), mismatched=bad[:8])

    def tr_check():
        m = E.SD3Transformer2DModel.from_single_file(out_path, config=pdir, subfolder="transformer",
                                                     torch_dtype=torch.float32, local_files_only=True)
        return cmp("transformer", m.state_dict())

    def pipe_check():
        p = E.StableDiffusion3Pipeline.from_single_file(out_path, config=pdir, torch_dtype=torch.float32,
                                                        local_files_only=True)
        return {c: cmp(c, getattr(p, c).state_dict()) for c in
                ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3")}
    info["transformer_from_single_file"] = g.guarded(f"{name}: single-file transformer check")(tr_check)()
    info["pipeline_from_single_file"] = g.guarded(f"{name}: single-file pipeline check")(pipe_check)()
    g.log(f"{name}: single file " + json.dumps(info)[:1500])
    return info


def speed(g, out, tokroot, sp_dir, budget):
    """diffusers fp16 at SD3-medium's real shapes, random weights: one transformer step, T5-XXL encode, VAE
    decode, the whole 28-step 1024x1024 pipeline."""
    E = g.E
    torch = E.torch
    dev = "cuda"
    t0 = time.time()
    R = dict(device=torch.cuda.get_device_name(0), dtype="float16", attention="SDPA (diffusers default)")

    def build(fn):
        with torch.device(dev):
            torch.manual_seed(0)
            m = fn()
        return m.to(torch.float16).eval()

    def rec(key, fn, warmup, iters):
        def go():
            with torch.inference_mode():
                r, _ = g.cuda_timer(fn, warmup, iters)
            R[key] = r
            g.log(f"speed {key}: {json.dumps(r)}")
        g.guarded(f"speed {key}")(go)()
    tr = build(lambda: E.SD3Transformer2DModel(sample_size=128, patch_size=2, in_channels=16, num_layers=24,
                                                attention_head_dim=64, num_attention_heads=24,
                                                joint_attention_dim=4096, caption_projection_dim=1536,
                                                pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=192))
    R["params_transformer"] = sum(p.numel() for p in tr.parameters())
    x = torch.randn(2, 16, 128, 128, device=dev, dtype=torch.float16)
    ctx = torch.randn(2, 333, 4096, device=dev, dtype=torch.float16)
    pooled = torch.randn(2, 2048, device=dev, dtype=torch.float16)
    ts = torch.full((2,), 500.0, device=dev)
    rec("sd3m_transformer_b2_1024", lambda: tr(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled,
                                               timestep=ts, return_dict=False)[0], 3, 10)
    vae = build(lambda: E.AutoencoderKL(**g.vae_cfg(1.5305, latent=16, boc=(128, 256, 512, 512), extra=dict(
        shift_factor=0.0609, use_quant_conv=False, use_post_quant_conv=False, norm_num_groups=32, sample_size=1024))))
    z = torch.randn(1, 16, 128, 128, device=dev, dtype=torch.float16)
    rec("sd3m_vae_decode_1024", lambda: vae.decode(z, return_dict=False)[0], 2, 5)
    t5 = build(lambda: E.T5EncoderModel(E.T5Config(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24,
                                                   num_heads=64, relative_attention_num_buckets=32,
                                                   relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
                                                   dropout_rate=0.0, is_encoder_decoder=False, use_cache=False)))
    ids = torch.randint(0, 32128, (1, 256), device=dev)
    rec("t5xxl_encode_256", lambda: t5(ids)[0], 2, 5)
    te1 = build(lambda: E.CLIPTextModelWithProjection(E.CLIPTextConfig(**g.CLIP_L)))
    te2 = build(lambda: E.CLIPTextModelWithProjection(E.CLIPTextConfig(**g.CLIP_BIGG)))
    tok = g.load_tokenizer(os.path.join(tokroot, "pad_eot"))
    tok2 = g.load_tokenizer(os.path.join(tokroot, "pad_excl"))
    tok3 = E.transformers.T5TokenizerFast.from_pretrained(os.path.join(sp_dir, "hf"))
    sched = E.FlowMatchEulerDiscreteScheduler(**SD3_SCHED)
    pipe = E.StableDiffusion3Pipeline(transformer=tr, scheduler=sched, vae=vae, text_encoder=te1, tokenizer=tok,
                                      text_encoder_2=te2, tokenizer_2=tok2, text_encoder_3=t5, tokenizer_3=tok3)
    pipe.set_progress_bar_config(disable=True)
    if time.time() - t0 < budget:
        rec("sd3m_txt2img_1024_28steps_cfg7", lambda: pipe("a photo of an astronaut riding a horse on mars",
                                                           num_inference_steps=28, guidance_scale=7.0, height=1024,
                                                           width=1024, output_type="pil",
                                                           generator=torch.Generator(dev).manual_seed(0)), 1, 2)
    R["total_s"] = time.time() - t0
    g.jdump(R, os.path.join(out, "speed_sd3.json"))


OUT = None
TOK_CLASS = "T5TokenizerFast"


def main():
    global OUT, TOK_CLASS
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--scripts", required=True)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--speed-budget", type=float, default=200.0)
    ap.add_argument("--skip-fixtures", action="store_true")
    ap.add_argument("--spm", default=None, help="use this sentencepiece model instead of training one")
    a = ap.parse_args()
    OUT = os.path.abspath(a.out)
    os.makedirs(OUT, exist_ok=True)
    g = load_gen(a.gen)
    g.setup_torch()
    torch = g.E.torch
    torch.set_grad_enabled(False)
    g.log("versions " + json.dumps(g.versions()))
    sp, tok = g.guarded("t5 tokenizer")(make_t5_tokenizer)(g, OUT, a.corpus, a.spm) or (None, None)
    if sp is None:
        raise SystemExit("no tokenizer")
    TOK_CLASS = type(tok).__name__
    tokroot = os.path.join(OUT, "_tok")
    g.tokenizer_files(os.path.join(tokroot, "pad_eot"), a.tok, "<|endoftext|>")
    g.tokenizer_files(os.path.join(tokroot, "pad_excl"), a.tok, "!")
    shutil.copytree(a.tok, os.path.join(tokroot, "src"), dirs_exist_ok=True)
    if not a.skip_fixtures:
        add_pipelines(g, sp)
        round_f16(g)
        g.build_set("sd3", OUT, tokroot, a.scripts, False)
        for name in ("sd3", "sd35"):
            pdir = os.path.join(OUT, "sd3", "pipelines", name)
            rdir = os.path.join(OUT, "sd3", "refs", name)
            if os.path.exists(os.path.join(rdir, "meta.json")):
                g.guarded(f"{name}: extra runs")(extra_runs)(g, name, pdir, rdir)
        os.makedirs(os.path.join(OUT, "sd3", "single_file"), exist_ok=True)
        info = g.guarded("sd3: single file")(single_file)(
            g, "sd3", os.path.join(OUT, "sd3", "pipelines", "sd3"),
            os.path.join(OUT, "sd3", "single_file", "sd3.safetensors"), a.scripts)
        g.jdump(info, os.path.join(OUT, "sd3", "single_file", "info.json"))
    if a.speed and torch.cuda.is_available():
        g.guarded("speed")(speed)(g, OUT, tokroot, os.path.join(OUT, "t5tok"), a.speed_budget)
    shutil.rmtree(tokroot, ignore_errors=True)
    g.jdump(dict(errors=g.ERRORS), os.path.join(OUT, "run_report.json"))
    with open(os.path.join(OUT, "log.txt"), "w") as f:
        f.write("\n".join(g.LOG))
    g.log(f"done with {len(g.ERRORS)} errors")


if __name__ == "__main__":
    main()
