#!/usr/bin/env python3
"""Trains rbee-c's default model: a small Llama (transformers LlamaForCausalLM) on the KJV corpus.

Why: the bundled default model must be a real, if tiny, Llama-architecture checkpoint whose every
setting is recorded and whose training can be re-run with one command (train.sh). With ~1M training
tokens the limit is data, not compute, so this script runs a short, fixed sweep over training length
and residual dropout (every run from the same seed), keeps each run's checkpoint with the lowest
validation loss, and saves the best of them in float32 as an HF folder. The test split is not read
here: it stays untouched for evaluate.py.
"""

import argparse
import json
import math
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

import textdata

BOS_ID = 0
EOS_ID = 1

# The sweep, in the order it runs. Every run starts from the same seed and initial weights.
# "epochs" is the number of passes over the training stream (steps = epochs * tokens / batch tokens).
SWEEP = [
    {"name": "e16-d10", "epochs": 16, "dropout": 0.10},
    {"name": "e32-d10", "epochs": 32, "dropout": 0.10},
    {"name": "e32-d20", "epochs": 32, "dropout": 0.20},
    {"name": "e64-d20", "epochs": 64, "dropout": 0.20},
]


def log(msg):
    print(msg, flush=True)


def make_config(a, vocab_size):
    common = dict(vocab_size=vocab_size, hidden_size=a.hidden, intermediate_size=a.ffn,
                  num_hidden_layers=a.layers, num_attention_heads=a.heads,
                  num_key_value_heads=a.kv_heads, hidden_act="silu",
                  max_position_embeddings=a.ctx, rms_norm_eps=1e-5, initializer_range=0.02,
                  tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                  attention_bias=False, mlp_bias=False, attention_dropout=0.0, use_cache=True)
    try:  # transformers 5: RoPE settings live in rope_parameters
        cfg = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": a.rope_theta}, **common)
    except TypeError:  # transformers 4
        cfg = LlamaConfig(rope_theta=a.rope_theta, **common)
    return cfg


def make_model(cfg, seed, device):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.tie_weights()
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise SystemExit("train_model: lm_head is not tied to embed_tokens")
    return model.to(device=device, dtype=torch.float32)


def add_residual_dropout(model, p):
    """Dropout on each attention and MLP output before it joins the residual stream (training only;
    Llama has no such dropout of its own, and without it the model memorises 1M tokens quickly)."""
    def hook(module, _inputs, output):
        if not module.training or p <= 0.0:
            return None
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
        return F.dropout(output, p, True)
    return [m.register_forward_hook(hook) for layer in model.model.layers
            for m in (layer.self_attn, layer.mlp)]


def lr_at(step, total, peak, warmup, min_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (min_frac + (1.0 - min_frac) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t))))


def logits_fn_for(model, device, use_bf16):
    def fn(x):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
            return model(input_ids=x.to(device), use_cache=False).logits.float()
    return fn


def run_one(a, spec, cfg, train_stream, valid_stream, device, deadline):
    model = make_model(cfg, a.seed, device)
    hooks = add_residual_dropout(model, spec["dropout"])
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt_kwargs = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        opt_kwargs["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kwargs)
    tokens_per_step = a.batch * a.ctx
    steps = max(1, round(spec["epochs"] * train_stream.numel() / tokens_per_step))
    use_bf16 = device.type == "cuda"
    gen = torch.Generator(device="cpu")
    gen.manual_seed(a.seed + 1)
    stream_dev = train_stream.to(device)
    offs = torch.arange(a.ctx + 1, device=device)
    hi = train_stream.numel() - a.ctx - 1
    best = {"valid_loss": float("inf"), "step": -1, "state": None}
    history = []
    run_loss, run_n = 0.0, 0
    t0 = time.time()
    truncated = False
    log("run %s: %d steps of %d x %d tokens (%.1f epochs), dropout %.2f, lr %.2e" % (
        spec["name"], steps, a.batch, a.ctx, steps * tokens_per_step / train_stream.numel(),
        spec["dropout"], a.lr))
    model.train()
    for step in range(steps):
        lr = lr_at(step, steps, a.lr, a.warmup, a.min_lr_frac)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, hi, (a.batch,), generator=gen).to(device)
        batch = stream_dev[starts[:, None] + offs]
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        run_loss += loss.detach()
        run_n += 1
        last = step == steps - 1
        out_of_time = time.time() > deadline
        if (step + 1) % a.eval_every == 0 or last or out_of_time:
            model.eval()
            vt, vc = textdata.score_nonoverlapping(logits_fn_for(model, device, use_bf16),
                                                   valid_stream, a.ctx)
            model.train()
            vloss = vt / vc
            tloss = float(run_loss) / run_n
            run_loss, run_n = 0.0, 0
            elapsed = time.time() - t0
            history.append({"step": step + 1, "train_loss": tloss, "valid_loss": vloss,
                            "lr": lr, "seconds": elapsed})
            mark = ""
            if vloss < best["valid_loss"]:
                best = {"valid_loss": vloss, "step": step + 1,
                        "state": {k: v.detach().to("cpu", copy=True)
                                  for k, v in model.state_dict().items()}}
                mark = " *"
            log("  %s step %5d/%d  train %.4f  valid %.4f (ppl %.2f)  lr %.2e  %.0fs%s" % (
                spec["name"], step + 1, steps, tloss, vloss, math.exp(vloss), lr, elapsed, mark))
            if out_of_time and not last:
                truncated = True
                log("  %s: time budget reached, stopping at step %d" % (spec["name"], step + 1))
                break
    for h in hooks:
        h.remove()
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.time() - t0
    result = {"name": spec["name"], "epochs": spec["epochs"], "dropout": spec["dropout"],
              "steps_planned": steps, "steps_done": history[-1]["step"], "truncated": truncated,
              "best_step": best["step"], "best_valid_loss": best["valid_loss"],
              "final_train_loss": history[-1]["train_loss"], "seconds": secs,
              "seconds_per_step": secs / history[-1]["step"], "history": history}
    return result, best["state"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True, help="folder with train.txt and valid.txt")
    ap.add_argument("--tokenizer-dir", required=True, help="folder with tokenizer.json")
    ap.add_argument("--out-dir", required=True, help="HF folder to write (config, weights)")
    ap.add_argument("--summary", required=True, help="JSON file for the sweep's results")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall time for the whole sweep")
    ap.add_argument("--epoch-scale", type=float, default=1.0, help="multiplies every run's epochs "
                    "(only for quick local checks; the published model uses 1.0)")
    a = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log("versions: python %s, torch %s, transformers %s, cuda %s, device %s" % (
        platform.python_version(), torch.__version__, transformers.__version__, torch.version.cuda,
        torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu"))

    tok = Tokenizer.from_file(os.path.join(a.tokenizer_dir, "tokenizer.json"))
    if tok.token_to_id("<|begin_of_text|>") != BOS_ID or tok.token_to_id("<|end_of_text|>") != EOS_ID:
        raise SystemExit("train_model: tokenizer's special ids are not 0/1")
    train_stream = textdata.build_stream(tok, os.path.join(a.data_dir, "train.txt"), BOS_ID, EOS_ID)
    valid_stream = textdata.build_stream(tok, os.path.join(a.data_dir, "valid.txt"), BOS_ID, EOS_ID)
    log("tokens: train %d, valid %d" % (train_stream.numel(), valid_stream.numel()))

    cfg = make_config(a, tok.get_vocab_size())
    n_params = sum(p.numel() for p in make_model(cfg, a.seed, torch.device("cpu")).parameters())
    log("model: %d params (tied embeddings), hidden %d, layers %d, heads %d/%d kv, ffn %d, ctx %d" % (
        n_params, a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.ctx))
    log("settings: %s" % json.dumps(vars(a), sort_keys=True))

    t_start = time.time()
    deadline = t_start + a.budget_s
    results = []
    best_state, best_res = None, None
    for spec0 in SWEEP:
        spec = dict(spec0, epochs=spec0["epochs"] * a.epoch_scale)
        if results:  # skip a run that would not fit, judging from the measured speed
            sps = max(r["seconds_per_step"] for r in results if not r.get("skipped"))
            need = sps * spec["epochs"] * train_stream.numel() / (a.batch * a.ctx) * 1.1
            if time.time() + need > deadline:
                log("run %s skipped: needs ~%.0fs, %.0fs left" % (spec["name"], need,
                                                                   deadline - time.time()))
                results.append({"name": spec["name"], "skipped": True})
                continue
        res, state = run_one(a, spec, cfg, train_stream, valid_stream, device, deadline)
        results.append(res)
        if state is not None and (best_res is None or res["best_valid_loss"] < best_res["best_valid_loss"]):
            best_state, best_res = state, res
    total_s = time.time() - t_start

    log("sweep (checkpoint = lowest validation loss of the run):")
    log("  %-8s %6s %5s %7s %7s %9s %9s %7s" % ("run", "epochs", "drop", "steps", "best@", "train", "valid", "secs"))
    for r in results:
        if r.get("skipped"):
            log("  %-8s skipped" % r["name"])
            continue
        log("  %-8s %6.1f %5.2f %7d %7d %9.4f %9.4f %7.1f%s" % (
            r["name"], r["epochs"], r["dropout"], r["steps_done"], r["best_step"],
            r["final_train_loss"], r["best_valid_loss"], r["seconds"],
            "  (truncated)" if r["truncated"] else ""))
    log("selected: %s at step %d (valid loss %.4f, ppl %.2f); sweep wall time %.1fs" % (
        best_res["name"], best_res["best_step"], best_res["best_valid_loss"],
        math.exp(best_res["best_valid_loss"]), total_s))

    model = make_model(cfg, a.seed, torch.device("cpu"))
    model.load_state_dict(best_state)
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                                               pad_token_id=EOS_ID, do_sample=True,
                                               temperature=0.8, top_k=40, top_p=0.95)
    os.makedirs(a.out_dir, exist_ok=True)
    try:
        model.save_pretrained(a.out_dir)  # safetensors, float32, lm_head left out (tied)
    except Exception as e:  # keep the trained weights even if this transformers' API differs
        log("save_pretrained failed (%r); writing the folder by hand" % (e,))
        from safetensors.torch import save_file
        sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, os.path.join(a.out_dir, "model.safetensors"), metadata={"format": "pt"})
        cfg.architectures = ["LlamaForCausalLM"]
        cfg.to_json_file(os.path.join(a.out_dir, "config.json"))
        model.generation_config.to_json_file(os.path.join(a.out_dir, "generation_config.json"))
    if not os.path.isfile(os.path.join(a.out_dir, "model.safetensors")):
        raise SystemExit("train_model: no model.safetensors in %s" % a.out_dir)
    with open(a.summary, "w", encoding="utf-8") as f:
        json.dump({"n_params": n_params, "settings": vars(a), "sweep": SWEEP, "results": results,
                   "selected": best_res["name"], "selected_step": best_res["best_step"],
                   "sweep_seconds": total_s, "train_tokens": train_stream.numel(),
                   "valid_tokens": valid_stream.numel(), "torch": torch.__version__,
                   "transformers": transformers.__version__}, f, indent=1)
    log("saved %s" % a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
