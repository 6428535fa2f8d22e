"""Trains rbee-c's default Stable Diffusion model (SD 1.x architecture, small widths) on scenes.py's images
and writes it as a diffusers folder.

Why: the SD worker needs a model that ships with the project, draws what simple prompts say, and runs in
seconds on two CPU cores. Phases: the VAE (reconstruction + a small KL term), its latent scaling factor,
then the UNet and the CLIP text encoder together on the frozen VAE's latents (epsilon prediction, DDPM
scaled_linear betas, 10% empty captions for classifier-free guidance, EMA weights). Every random choice
comes from --seed. Writes OUT/model (the diffusers folder), OUT/samples-*.png, OUT/summary.json.

  python3 train.py --out DIR [--device cuda] [--quick]
"""
import argparse
import copy
import json
import math
import os
import shutil
import struct
import time

import torch
import torch.nn.functional as F

import analyse
import clip_vocab
import pngio
import scenes
import sdnets

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def save_safetensors(path, sd, dtype=torch.float16):
    """The safetensors format: an 8-byte header length, a JSON header of names/dtypes/shapes/offsets, data."""
    names = sorted(sd)
    header, off, blobs = {}, 0, []
    for n in names:
        t = sd[n].detach().to("cpu", dtype).contiguous()
        b = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[n] = {"dtype": {torch.float16: "F16", torch.float32: "F32"}[dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """name -> float32 tensor of a safetensors file of F16/F32 tensors."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F16": torch.float16, "F32": torch.float32}[v["dtype"]]
        out[k] = torch.frombuffer(bytearray(data[8 + n + a:8 + n + b]), dtype=dt).view(v["shape"]).float()
    return out


def load_folder(model_dir):
    """A saved diffusers folder as sdnets modules (eval mode, CPU): unet, te, vae, their configs (vae, unet,
    text encoder) and the tokenizer's vocabulary."""
    cfg = lambda p: json.load(open(os.path.join(model_dir, p)))  # noqa: E731
    unet, te, vae = sdnets.UNet(cfg("unet/config.json")), sdnets.ClipTextModel(cfg("text_encoder/config.json")), \
        sdnets.Vae(cfg("vae/config.json"))
    unet.load_state_dict(load_safetensors(os.path.join(model_dir, "unet/diffusion_pytorch_model.safetensors")))
    te.load_state_dict(load_safetensors(os.path.join(model_dir, "text_encoder/model.safetensors")))
    vae.load_state_dict(load_safetensors(os.path.join(model_dir, "vae/diffusion_pytorch_model.safetensors")))
    vocab = json.load(open(os.path.join(model_dir, "tokenizer/vocab.json")))
    return (unet.eval(), te.eval(), vae.eval(), cfg("vae/config.json"), cfg("unet/config.json"),
            cfg("text_encoder/config.json"), vocab)


def alphas_cumprod(device):
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2  # scaled_linear
    return torch.cumprod(1 - betas, 0).to(device)


class Budget:
    """Fits a phase's run (and so its learning-rate schedule) to its time budget: once, at step 400, from the
    pace of steps 100-400 (the first steps compile and warm up), timed after a device synchronization so that
    queued work counts; and stops the run outright if it still overruns, so a call's time limit is never hit."""

    def __init__(self, seconds, what, log, dev):
        self.t0, self.seconds, self.what, self.log, self.dev, self.t100 = time.time(), seconds, what, log, dev, None

    def now(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        return time.time()

    def fit(self, step, total):
        if self.seconds <= 0:
            return total
        if step == 100:
            self.t100 = self.now()
        if step == 400 and self.t100 is not None:
            now = self.now()
            fit = 400 + int((self.seconds - (now - self.t0)) * 300 / max(1e-6, now - self.t100))
            if fit < total:
                self.log(f"{self.what}: {total} steps would exceed {self.seconds:.0f}s; training {fit}")
                return max(fit, 401)
        if step % 100 == 0 and step > 400 and time.time() - self.t0 > self.seconds * 1.05:
            self.log(f"{self.what}: over the time budget at step {step}; stopping")
            return step
        return total


def training_step(fn, params, mode, log, what):
    """A step's forward and backward: fn returns a tuple of losses, the first is differentiated. fn runs
    through torch.compile (mode "none": as it is). A compiler failure, in the forward or in the lazily
    compiled backward, falls back to eager for the rest of the run, with a line in the log, so a long run
    never dies of it."""
    state = {"fn": fn if mode == "none" else torch.compile(fn, mode=None if mode == "default" else mode)}

    def run(f, a):
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        out = f(*a)
        out[0].backward()
        return tuple(o.detach().clone() for o in out)  # CUDA graph outputs are overwritten by the next step

    def call(*a):
        try:
            return run(state["fn"], a)
        except Exception as e:  # noqa: BLE001 (any compiler error: eager is always right)
            if state["fn"] is fn:
                raise
            log(f"{what}: torch.compile failed ({type(e).__name__}: {str(e)[:300]}); eager from here")
            state["fn"] = fn
            for p in params:
                p.grad = None
            return run(fn, a)
    return call


def ema_update(ema, model, decay):
    with torch.no_grad():
        pe, pm = list(ema.parameters()), [p.detach() for p in model.parameters()]
        torch._foreach_mul_(pe, decay)
        torch._foreach_add_(pe, pm, alpha=1 - decay)


def adamw(params, lr, weight_decay, dev):
    """AdamW, fused into one kernel family on CUDA (the steps are launch-bound at these widths)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **({"fused": True} if dev.type == "cuda" else {}))


def lr_at(step, total, peak, warm=200):
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


class Data:
    """Training images rendered once on the device (seeds 0..n-1; held-out combinations never drawn), their
    CLIP ids, and a seeded sampler of batches."""

    def __init__(self, n, size, dev, vocab, seed):
        self.x, caps = scenes.dataset(range(n), size, dev)
        self.ids = scenes.clip_ids(caps, vocab).to(dev)
        self.gen = torch.Generator(dev).manual_seed(seed)

    def batch(self, bs):
        i = torch.randint(0, self.x.shape[0], (bs,), device=self.x.device, generator=self.gen)
        return self.x[i].float() / 127.5 - 1, self.ids[i]

    def encode(self, vae, bs=500):
        """The frozen VAE's latent mean and log-variance of every training image, once, for the UNet phase."""
        with torch.no_grad():
            parts = [vae.encode(self.x[i:i + bs].float() / 127.5 - 1) for i in range(0, self.x.shape[0], bs)]
        self.mean, self.logvar = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def latent_batch(self, bs):
        i = torch.randint(0, self.x.shape[0], (bs,), device=self.x.device, generator=self.gen)
        return self.mean[i], self.logvar[i], self.ids[i]


def heldout_images(n, size, dev, first_seed):
    x, caps, _ = scenes.batch(range(first_seed, first_seed + n), size, heldout=True, device=dev)
    return x * 2 - 1, caps


def train_vae(args, dev, data, log):
    cfg = sdnets.vae_config(channels=args.vae_channels, layers=args.vae_layers, groups=args.groups, sample=args.size)
    torch.manual_seed(args.seed + 1)
    vae = sdnets.Vae(cfg).to(dev)
    opt = adamw(vae.parameters(), args.vae_lr, 0.0, dev)
    latent = (args.batch, cfg["latent_channels"], args.size // 8, args.size // 8)

    def losses(x, noise):
        mean, logvar = vae.encode(x)
        rec = vae.decode(mean + noise * (0.5 * logvar).exp())
        l_rec = F.mse_loss(rec, x) + 0.5 * F.l1_loss(rec, x)
        l_kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).sum(dim=(1, 2, 3)).mean()
        return l_rec + args.kl * l_kl, l_rec, l_kl

    vae_step = training_step(losses, list(vae.parameters()), args.compile, log, "vae")
    t0, total, budget = time.time(), args.vae_steps, Budget(args.budget_s * 0.25, "vae", log, dev)
    step = 0
    while step < total:
        total = budget.fit(step, total)
        if step >= total:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, args.vae_lr)
        x, _ = data.batch(args.batch)
        opt.zero_grad(set_to_none=True)
        loss, l_rec, l_kl = vae_step(x, torch.randn(latent, device=dev))
        opt.step()
        if step % args.log_every == 0 or step == total - 1:
            log(f"vae step {step} rec {l_rec.item():.5f} kl {l_kl.item():.2f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{time.time() - t0:.0f}s")
        step += 1
    vae.eval()
    with torch.no_grad():  # scaling factor: 1 / std of the latents, as SD's 0.18215 was chosen
        zs = [vae.encode(data.batch(args.batch)[0])[0] for i in range(8)]
        std = torch.cat(zs).std().item()
        x, _ = heldout_images(16, args.size, dev, 30_000_000)
        rec = vae.decode(vae.encode(x)[0])
        psnr = 10 * math.log10(4.0 / F.mse_loss(rec, x).item())
    cfg["scaling_factor"] = round(1.0 / std, 5)
    log(f"vae latent std {std:.4f} -> scaling_factor {cfg['scaling_factor']}; held-out PSNR {psnr:.2f} dB")
    pngio.write_png(os.path.join(args.out, "samples-vae.png"),
                    pngio.grid(torch.cat([x[:8], rec[:8]]).cpu() * 0.5 + 0.5, 8))
    return vae, cfg, {"vae_psnr_db": psnr, "vae_latent_std": std, "vae_seconds": time.time() - t0, "vae_steps": total}


def sample(unet, te, vae, vcfg, ids, uncond, steps, cfg_scale, seed, size, dev):
    """Euler (diffusers' EulerDiscreteScheduler, linspace spacing) with classifier-free guidance."""
    acp = alphas_cumprod(dev)
    sig_all = ((1 - acp) / acp).sqrt()
    ts = torch.linspace(0, 999, steps, dtype=torch.float64, device=dev).flip(0)
    lo, frac = ts.floor().long(), ts - ts.floor()
    sig = (1 - frac) * sig_all[lo] + frac * sig_all[(lo + 1).clamp(max=999)]
    sig = torch.cat([sig, sig.new_zeros(1)])
    g = torch.Generator("cpu").manual_seed(seed)
    n, s = ids.shape[0], size // 8
    x = torch.randn(n, 4, s, s, generator=g).to(dev).double() * sig[0]
    with torch.no_grad():
        ctx = torch.cat([te(uncond.expand(n, -1)), te(ids)])
        for i in range(steps):
            xin = (x / (sig[i] ** 2 + 1).sqrt()).float()
            e = unet(torch.cat([xin, xin]), ts[i].float().expand(2 * n), ctx).double()
            e = e[:n] + cfg_scale * (e[n:] - e[:n])
            x = x + e * (sig[i + 1] - sig[i])
        img = vae.decode((x / vcfg["scaling_factor"]).float())
    return (img * 0.5 + 0.5).clamp(0, 1)


def train_unet(args, dev, data, vae, vcfg, vocab, log, init=None, budget_share=0.75):
    """init: (unet, te, unet config, text config) to go on training from, else new networks."""
    if init:
        unet, te, ucfg, tcfg = init
        unet, te = unet.to(dev).train(), te.to(dev).train()
    else:
        tcfg = sdnets.clip_config(hidden=args.text_hidden, layers=args.text_layers, heads=args.text_heads,
                                  ff=args.text_hidden * 4)
        ucfg = sdnets.unet_config(channels=args.unet_channels, layers=args.unet_layers, heads=args.heads,
                                  ctx=args.text_hidden, groups=args.groups, sample=args.size // 8)
        torch.manual_seed(args.seed + 2)
        te = sdnets.ClipTextModel(tcfg).to(dev)
        with torch.no_grad():
            te.text_model.embeddings.token_embedding.weight.normal_(0, 0.02)
            te.text_model.embeddings.position_embedding.weight.normal_(0, 0.01)
        torch.manual_seed(args.seed + 3)
        unet = sdnets.UNet(ucfg).to(dev)
    ema_u, ema_t = copy.deepcopy(unet).eval(), copy.deepcopy(te).eval()
    params = list(unet.parameters()) + list(te.parameters())
    opt = adamw(params, args.unet_lr, 0.01, dev)
    acp = alphas_cumprod(dev).float()
    uncond = scenes.clip_ids([""], vocab).to(dev)
    gen = torch.Generator(dev).manual_seed(args.seed + 4)
    data.encode(vae)
    step_loss = training_step(lambda zt, t, ids, eps: (F.mse_loss(unet(zt, t, te(ids)), eps),), params, args.compile,
                              log, "unet")
    t0, ema_loss, total = time.time(), None, args.unet_steps
    budget = Budget(args.budget_s * budget_share, "unet", log, dev)
    step = 0
    while step < total:
        total = budget.fit(step, total)
        if step >= total:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, args.unet_lr)
        mean, logvar, ids = data.latent_batch(args.batch)
        drop = torch.rand(ids.shape[0], device=dev, generator=gen) < 0.1
        ids = torch.where(drop[:, None], uncond.expand_as(ids), ids)
        z = (mean + torch.randn(mean.shape, device=dev, generator=gen) * (0.5 * logvar).exp()) * vcfg["scaling_factor"]
        t = torch.randint(0, 1000, (z.shape[0],), device=dev, generator=gen)
        eps = torch.randn(z.shape, device=dev, generator=gen)
        a = acp[t].view(-1, 1, 1, 1)
        zt = a.sqrt() * z + (1 - a).sqrt() * eps
        opt.zero_grad(set_to_none=True)
        loss, = step_loss(zt, t, ids, eps)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ema_update(ema_u, unet, args.ema if step > 500 else 0.0)
        ema_update(ema_t, te, args.ema if step > 500 else 0.0)
        ema_loss = loss.detach() if ema_loss is None else 0.98 * ema_loss + 0.02 * loss.detach()  # no sync a step
        if step % args.log_every == 0 or step == total - 1:
            log(f"unet step {step} loss {loss.item():.4f} (smoothed {ema_loss.item():.4f}) lr {opt.param_groups[0]['lr']:.2e} "
                f"{time.time() - t0:.0f}s")
        step += 1
    return ema_u, ema_t, ucfg, tcfg, {"unet_final_loss_smoothed": ema_loss.item(), "unet_seconds": time.time() - t0,
                                      "unet_steps": total}


def write_folder(dst, unet, te, vae, ucfg, tcfg, vcfg, tok_dir):
    for sub in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        os.makedirs(os.path.join(dst, sub), exist_ok=True)
    save_safetensors(os.path.join(dst, "unet", "diffusion_pytorch_model.safetensors"), unet.state_dict())
    save_safetensors(os.path.join(dst, "vae", "diffusion_pytorch_model.safetensors"), vae.state_dict())
    save_safetensors(os.path.join(dst, "text_encoder", "model.safetensors"), te.state_dict())
    dump = lambda p, o: json.dump(o, open(os.path.join(dst, p), "w"), indent=2)  # noqa: E731
    dump("unet/config.json", ucfg)
    dump("vae/config.json", vcfg)
    dump("text_encoder/config.json", tcfg)
    dump("scheduler/scheduler_config.json", {
        "_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.30.0", "beta_start": 0.00085,
        "beta_end": 0.012, "beta_schedule": "scaled_linear", "num_train_timesteps": 1000,
        "prediction_type": "epsilon", "timestep_spacing": "linspace", "steps_offset": 1,
        "interpolation_type": "linear", "use_karras_sigmas": False, "trained_betas": None})
    dump("model_index.json", {
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
        "feature_extractor": [None, None], "image_encoder": [None, None], "requires_safety_checker": False,
        "safety_checker": [None, None], "scheduler": ["diffusers", "EulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]})
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(tok_dir, f), os.path.join(dst, "tokenizer", f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--clip-bpe", default=os.path.join(ROOT, "models", "clip", "bpe_simple_vocab_16e6.txt.gz"),
                    help="OpenAI's CLIP BPE file; the model's tokenizer files are derived from it")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--images", type=int, default=50000, help="training images rendered once (seeds 0..N-1)")
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--vae-channels", type=int, nargs="+", default=[32, 64, 64, 64])
    ap.add_argument("--vae-layers", type=int, default=1)
    ap.add_argument("--vae-steps", type=int, default=8000, help="at most; the time budget may train fewer")
    ap.add_argument("--vae-lr", type=float, default=4e-4)
    ap.add_argument("--kl", type=float, default=1e-6)
    ap.add_argument("--unet-channels", type=int, nargs="+", default=[64, 128, 128])
    ap.add_argument("--unet-layers", type=int, default=1)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--unet-steps", type=int, default=60000, help="at most; the time budget may train fewer")
    ap.add_argument("--unet-lr", type=float, default=3e-4)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--text-hidden", type=int, default=64)
    ap.add_argument("--text-layers", type=int, default=3)
    ap.add_argument("--text-heads", type=int, default=4)
    ap.add_argument("--eval-images", type=int, default=128, help="held-out captions judged by analyse.py")
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--budget-s", type=float, default=460,
                    help="training time budget in seconds (a quarter for the VAE); 0 = none")
    ap.add_argument("--compile", choices=("none", "default", "reduce-overhead"),
                    default="reduce-overhead" if torch.cuda.is_available() and hasattr(torch, "compile") else "none",
                    help="torch.compile mode of the training steps (falls back to eager if the compiler fails)")
    ap.add_argument("--init-from", metavar="DIR",
                    help="a saved model folder to go on training: its VAE is kept, its UNet and text encoder trained "
                         "for the whole budget (the network options are then the folder's)")
    ap.add_argument("--quick", action="store_true", help="a few steps of everything: a smoke test of the pipeline")
    args = ap.parse_args()
    if args.quick:
        args.vae_steps, args.unet_steps, args.batch, args.log_every, args.images, args.eval_images = 4, 4, 4, 1, 16, 8
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "train_log.txt"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    log(f"== default SD model: torch {torch.__version__} on {args.device}; args {vars(args)}")
    tok_dir = os.path.join(args.out, "tokenizer")
    vocab = clip_vocab.write(args.clip_bpe, tok_dir)
    t0 = time.time()
    data = Data(args.images, args.size, dev, vocab, args.seed)
    log(f"rendered {args.images} training images in {time.time() - t0:.1f}s")
    if args.init_from:  # go on from a saved folder: its VAE as it is, its UNet and text encoder trained further
        u0, t0_, vae, vcfg, ucfg0, tcfg0, _ = load_folder(args.init_from)
        vae = vae.to(dev)
        s_vae = {"init_from": args.init_from}
        log(f"from {args.init_from}: its VAE (scaling_factor {vcfg['scaling_factor']}), UNet and text encoder")
    else:
        vae, vcfg, s_vae = train_vae(args, dev, data, log)
    for p in vae.parameters():
        p.requires_grad_(False)
    unet, te, ucfg, tcfg, s_unet = train_unet(args, dev, data, vae, vcfg, vocab, log,
                                              init=(u0, t0_, ucfg0, tcfg0) if args.init_from else None,
                                              budget_share=1.0 if args.init_from else 0.75)
    dst = os.path.join(args.out, "model")
    write_folder(dst, unet, te, vae, ucfg, tcfg, vcfg, tok_dir)
    # the published weights are f16: evaluate what is shipped
    for m in (unet, te, vae):
        for p in m.parameters():
            p.data = p.data.half().float()
    # held-out captions, 20 Euler steps: what the pictures show (analyse.py), per guidance scale
    _, caps, facts = scenes.batch(range(40_000_000, 40_000_000 + args.eval_images), args.size, heldout=True)
    ids = scenes.clip_ids(caps, vocab).to(dev)
    quality = {}
    for g in (3.0, 5.0, 7.5):
        imgs = torch.cat([sample(unet, te, vae, vcfg, ids[i:i + 32], scenes.clip_ids([""], vocab).to(dev), 20, g,
                                 42 + i, args.size, dev) for i in range(0, len(caps), 32)]).cpu()
        quality[f"cfg{g}"] = analyse.rate(imgs, facts)
        log(f"held-out, cfg {g}: {quality[f'cfg{g}']}")
        pngio.write_png(os.path.join(args.out, f"samples-heldout-cfg{g}.png"), pngio.grid(imgs[:16], 4))
    n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in (("unet", unet), ("text_encoder", te), ("vae", vae))}
    summary = {"params": n_params, "heldout_quality": quality, "heldout_captions": caps[:16], **s_vae, **s_unet}
    json.dump(summary, open(os.path.join(args.out, "summary.json"), "w"), indent=2)
    log(json.dumps(summary))


if __name__ == "__main__":
    main()
