#!/usr/bin/env python3
"""Reference runs of the diffusers schedulers that the pipeline fixtures lack, for rbee's sampler tests.

Drives each scheduler the way diffusers' Stable Diffusion pipelines do (set_timesteps, scale_model_input,
step, the img2img start and the 4-channel inpainting blend) with a synthetic deterministic model instead of
a UNet, on a 1x2x4x4 latent, and records every model input / output, timestep, latents after each step and
random draw. Also records torch RNG facts the fixtures do not cover (consecutive small CPU draws, the CPU
kernel in use, a large CUDA draw beyond the simple Philox layout).

Run on the GPU machine (diffusers from ../shared/tools/diffusers-src.tar.xz, no network):
    PYTHONPATH=<diffusers>/src python3 tests/sd/gen_sampler_refs.py --out "$OUT"
writes sampler_refs.safetensors + sampler_refs.json (about 150 kB) there; commit them as
tests/data/sd/sampler_refs.{safetensors,json}, which tests/sd/test_sd_sampler_gpu_refs.c consumes.
The CPU draws are torch's on that machine's CPU kernel (recorded in rng.cpu_capability).

Synthetic model: out = x_in * a(t) + b(t) * p_i with a(t) = 0.5 + 0.3 cos(0.003 t), b(t) = 0.2 sin(0.002 t + 1),
p_i = sin(0.37 i + 0.1) (a, b, p rounded to float32; products in float32).
"""
import argparse
import hashlib
import importlib.machinery
import inspect
import json
import math
import os
import sys
import types

SHAPE = (1, 2, 4, 4)
NUMEL = 32
BASE = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
            steps_offset=1, timestep_spacing="leading", set_alpha_to_one=False, clip_sample=False,
            prediction_type="epsilon")
TURBO = dict(BASE, timestep_spacing="trailing")  # SDXL-Turbo's published EulerAncestral config

# name, rbee sampler spec, diffusers class, config overrides, steps, strength, eta, inpaint, note
RUNS = [
    ("heun", "heun", "HeunDiscreteScheduler", {}, 5, 1.0, None, False, None),
    ("heun_karras_v", "heun_karras", "HeunDiscreteScheduler",
     dict(use_karras_sigmas=True, prediction_type="v_prediction", timestep_spacing="trailing"), 5, 1.0, None, False, None),
    ("heun_linspace", "heun", "HeunDiscreteScheduler", dict(timestep_spacing="linspace"), 4, 1.0, None, False, None),
    ("dpmpp_sde", "dpmpp_sde", "DPMSolverSDEScheduler", {}, 4, 1.0, None, False, None),
    ("dpmpp_sde_karras_v", "dpmpp_sde_karras", "DPMSolverSDEScheduler",
     dict(use_karras_sigmas=True, prediction_type="v_prediction"), 4, 1.0, None, False, None),
    ("euler_karras", "euler_karras", "EulerDiscreteScheduler", dict(use_karras_sigmas=True), 6, 1.0, None, False, None),
    ("euler_karras_v_trailing", "euler_karras", "EulerDiscreteScheduler",
     dict(use_karras_sigmas=True, prediction_type="v_prediction", timestep_spacing="trailing"), 6, 1.0, None, False, None),
    ("euler_exponential", "euler_exponential", "EulerDiscreteScheduler",
     dict(use_exponential_sigmas=True, timestep_spacing="trailing"), 6, 1.0, None, False, None),
    ("euler_linspace", "euler", "EulerDiscreteScheduler", dict(timestep_spacing="linspace"), 7, 1.0, None, False, None),
    ("euler_sigma_min_final", "euler", "EulerDiscreteScheduler", dict(final_sigmas_type="sigma_min"), 5, 1.0, None,
     False, None),
    ("euler_a_v_trailing", "euler_a", "EulerAncestralDiscreteScheduler",
     dict(prediction_type="v_prediction", timestep_spacing="trailing"), 5, 1.0, None, False, None),
    ("euler_a_karras", "euler_a_karras", "EulerAncestralDiscreteScheduler", {}, 6, 1.0, None, False,
     "EulerAncestralDiscreteScheduler has no karras option: its sigmas and timesteps are replaced after "
     "set_timesteps by those of EulerDiscreteScheduler(use_karras_sigmas=True) (A1111's 'Euler a Karras')"),
    ("dpmpp_2m", "dpmpp_2m", "DPMSolverMultistepScheduler", {}, 6, 1.0, None, False, None),
    ("dpmpp_2m_v_trailing", "dpmpp_2m", "DPMSolverMultistepScheduler",
     dict(prediction_type="v_prediction", timestep_spacing="trailing"), 6, 1.0, None, False, None),
    ("dpmpp_2m_linspace", "dpmpp_2m", "DPMSolverMultistepScheduler", dict(timestep_spacing="linspace"), 7, 1.0, None,
     False, None),
    ("dpmpp_2m_exponential", "dpmpp_2m_exponential", "DPMSolverMultistepScheduler", dict(use_exponential_sigmas=True),
     6, 1.0, None, False, None),
    ("dpmpp_2m_heun_solver", "dpmpp_2m", "DPMSolverMultistepScheduler", dict(solver_type="heun"), 6, 1.0, None, False,
     None),
    ("ddim_eta05", "ddim", "DDIMScheduler", {}, 5, 1.0, 0.5, False, None),
    ("ddim_eta1_v_trailing", "ddim", "DDIMScheduler", dict(prediction_type="v_prediction", timestep_spacing="trailing"),
     5, 1.0, 1.0, False, None),
    ("ddim_linspace", "ddim", "DDIMScheduler", dict(timestep_spacing="linspace"), 6, 1.0, 0.0, False, None),
    ("lcm_v", "lcm", "LCMScheduler", dict(prediction_type="v_prediction"), 4, 1.0, None, False, None),
    ("sdxl_turbo_1step", "euler_a", "EulerAncestralDiscreteScheduler", "turbo", 1, 1.0, None, False, None),
    ("sdxl_turbo_4step", "euler_a", "EulerAncestralDiscreteScheduler", "turbo", 4, 1.0, None, False, None),
    ("img2img_heun", "heun", "HeunDiscreteScheduler", {}, 6, 0.6, None, False, None),
    ("img2img_dpmpp_2m_karras", "dpmpp_2m_karras", "DPMSolverMultistepScheduler",
     dict(use_karras_sigmas=True), 8, 0.5, None, False, None),
    ("img2img_lcm", "lcm", "LCMScheduler", {}, 4, 0.75, None, False, None),
    ("inpaint_heun", "heun", "HeunDiscreteScheduler", {}, 4, 1.0, None, True, None),
    ("inpaint_dpmpp_2m", "dpmpp_2m", "DPMSolverMultistepScheduler", {}, 5, 1.0, None, True, None),
    ("inpaint_ddim", "ddim", "DDIMScheduler", {}, 5, 1.0, None, True, None),
    ("inpaint_euler_a_strength", "euler_a", "EulerAncestralDiscreteScheduler", {}, 6, 0.7, None, True, None),
]


def model_fn(torch, x_in, t):
    tf = float(t)
    a = torch.tensor(0.5 + 0.3 * math.cos(0.003 * tf), dtype=torch.float32)
    b = torch.tensor(0.2 * math.sin(0.002 * tf + 1.0), dtype=torch.float32)
    p = torch.tensor([math.sin(0.37 * i + 0.1) for i in range(NUMEL)], dtype=torch.float32).reshape(SHAPE)
    return x_in * a + p * b


def image_latents(torch):
    return torch.tensor([0.6 * math.cos(0.23 * i) for i in range(NUMEL)], dtype=torch.float32).reshape(SHAPE)


def mask_latents(torch):  # 1 = repaint; [1, 1, 4, 4]
    return torch.tensor([1.0 if (i % 4) < 2 else 0.0 for i in range(16)], dtype=torch.float32).reshape(1, 1, 4, 4)


def import_diffusers(meta):
    try:
        import importlib_metadata  # noqa: F401
    except ImportError:
        import importlib.metadata as im
        sys.modules["importlib_metadata"] = im
    import diffusers
    import torch
    try:
        import torchsde  # noqa: F401
        meta["torchsde"] = "importable (its Brownian tree is replaced by recorded torch.randn draws anyway)"
    except ImportError:
        # DPMSolverSDEScheduler's module imports torchsde but uses it only for its default noise sampler, which
        # these runs replace: a stub module (inserted after diffusers has probed its optional packages) lets the
        # module load; the class is then taken from its module, past diffusers' availability gate.
        stub = types.ModuleType("torchsde")
        stub.__spec__ = importlib.machinery.ModuleSpec("torchsde", None)

        def _no_tree(*a, **k):
            raise RuntimeError("torchsde stub: the noise sampler must be replaced")
        stub.BrownianInterval = _no_tree
        sys.modules["torchsde"] = stub
        meta["torchsde"] = "NOT importable: stubbed (the runs replace the Brownian-tree noise sampler)"
    return diffusers, torch


def scheduler_class(diffusers, name):
    if name == "DPMSolverSDEScheduler":
        from diffusers.schedulers.scheduling_dpmsolver_sde import DPMSolverSDEScheduler
        return DPMSolverSDEScheduler
    return getattr(diffusers, name)


class DrawLog:
    """Records every randn the schedulers make through diffusers' randn_tensor."""

    def __init__(self, torch, diffusers):
        self.torch, self.draws = torch, []
        import diffusers.utils.torch_utils as tu
        self.orig = tu.randn_tensor
        log = self

        def logged(shape, generator=None, device=None, dtype=None, layout=None, **kw):
            out = log.orig(shape, generator=generator, device=device, dtype=dtype, layout=layout, **kw)
            log.draws.append(out.detach().float().cpu().clone().reshape(-1))
            return out
        for m in list(sys.modules.values()):
            if m is not None and getattr(m, "randn_tensor", None) is self.orig:
                m.randn_tensor = logged
        self.logged = logged


def run_one(diffusers, torch, log, spec, tensors):
    name, rbee, cls_name, over, steps, strength, eta, inpaint, note = spec
    cfg = dict(TURBO) if over == "turbo" else dict(BASE, **over)
    cls = scheduler_class(diffusers, cls_name)
    sched = cls.from_config(cfg)
    sched.set_timesteps(steps, device="cpu")
    if name == "euler_a_karras":
        ek = diffusers.EulerDiscreteScheduler.from_config(cfg, use_karras_sigmas=True)
        ek.set_timesteps(steps, device="cpu")
        sched.sigmas = ek.sigmas.clone()
        sched.timesteps = ek.timesteps.clone()
    gen = torch.Generator("cpu").manual_seed(5000 + RUNS.index(spec))
    init_seed = 6000 + RUNS.index(spec)
    log.draws = []
    if cls_name == "DPMSolverSDEScheduler":  # recorded torch.randn instead of the Brownian tree
        sched.noise_sampler = lambda s0, s1: log.logged(SHAPE, generator=gen, dtype=torch.float32)
    image = image_latents(torch) if (strength < 1.0 or inpaint) else None
    timesteps = sched.timesteps
    init_timestep = min(int(steps * strength), steps)
    t_start = max(steps - init_timestep, 0)
    if image is not None or strength < 1.0:  # img2img / inpaint pipelines
        timesteps = sched.timesteps[t_start * sched.order:]
        if hasattr(sched, "set_begin_index"):  # DDIM indexes by timestep and has none
            sched.set_begin_index(t_start * sched.order)
    if strength < 1.0:
        noise = log.logged(SHAPE, generator=gen, dtype=torch.float32)  # prepare_latents' draw
        latents = sched.add_noise(image, noise, timesteps[:1])
    else:
        noise = torch.randn(SHAPE, generator=torch.Generator("cpu").manual_seed(init_seed))
        latents = noise * sched.init_noise_sigma
    mask = mask_latents(torch) if inpaint else None
    params = inspect.signature(sched.step).parameters
    kw = {}
    if "generator" in params:
        kw["generator"] = gen
    if "eta" in params and eta is not None:
        kw["eta"] = eta
    rec = dict(model_in=[], model_out=[], latents=[], timesteps=[])
    for i, t in enumerate(timesteps):
        x_in = sched.scale_model_input(latents, t)
        out = model_fn(torch, x_in, t)
        latents = sched.step(out, t, latents, **kw, return_dict=False)[0]
        if inpaint:  # StableDiffusionInpaintPipeline with a 4-channel UNet
            proper = image
            if i < len(timesteps) - 1:
                proper = sched.add_noise(proper, noise, torch.tensor([timesteps[i + 1]]))
            latents = (1 - mask) * proper + mask * latents
        rec["model_in"].append(x_in.float().reshape(-1))
        rec["model_out"].append(out.float().reshape(-1))
        rec["latents"].append(latents.float().reshape(-1))
        rec["timesteps"].append(float(torch.as_tensor(t).float()))
    E = len(rec["timesteps"])
    tensors[f"{name}.model_in"] = torch.stack(rec["model_in"])
    tensors[f"{name}.model_out"] = torch.stack(rec["model_out"])
    tensors[f"{name}.latents"] = torch.stack(rec["latents"])
    tensors[f"{name}.timesteps"] = torch.tensor(rec["timesteps"], dtype=torch.float32)
    tensors[f"{name}.noise"] = noise.float().reshape(-1)
    if image is not None:
        tensors[f"{name}.image"] = image.reshape(-1)
    if mask is not None:
        tensors[f"{name}.mask"] = mask.reshape(-1)
    for k, d in enumerate(log.draws):
        if strength < 1.0 and k == 0:
            continue  # the starting noise, stored as .noise
        tensors[f"{name}.draw{k - (1 if strength < 1.0 else 0)}"] = d
    n_step_draws = len(log.draws) - (1 if strength < 1.0 else 0)
    sig = getattr(sched, "sigmas", None)
    ins = getattr(sched, "init_noise_sigma", 1.0)
    return dict(run=name, sampler=rbee, scheduler_class=cls_name, config=dict(sched.config), steps=steps,
                strength=strength, eta=eta, inpaint=inpaint, note=note, generator_seed=5000 + RUNS.index(spec),
                init_latents_seed=None if strength < 1.0 else init_seed, n_evals=E, n_step_draws=n_step_draws,
                order=getattr(sched, "order", 1),
                timesteps=[float(x) for x in sched.timesteps.float().tolist()],
                sigmas=[float(x) for x in sig.tolist()] if sig is not None else None,
                init_noise_sigma=float(ins))


def rng_facts(torch, tensors):
    out = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    sizes = [1, 1, 3, 7, 16, 1, 2, 15, 17, 5]
    for seed in (0, 7):
        g = torch.Generator("cpu").manual_seed(seed)
        vals = [torch.randn((n,), generator=g) for n in sizes]
        tensors[f"rng.cpu_seq.seed{seed}"] = torch.cat(vals)
    out["cpu_seq_sizes"] = sizes
    x = torch.randn((1, 4, 64, 64), generator=torch.Generator("cpu").manual_seed(42))
    tensors["rng.cpu_big.seed42.first256"] = x.reshape(-1)[:256].clone()
    out["cpu_big"] = dict(seed=42, shape=[1, 4, 64, 64],
                          sha256_f32le=hashlib.sha256(x.numpy().astype("<f4").tobytes()).hexdigest(),
                          sum=float(x.double().sum()), sum_abs=float(x.double().abs().sum()))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        n = 1_200_000  # more than 4 x 256 x grid on an H100/H200: two rounds of curand_normal4
        g = torch.Generator("cuda").manual_seed(123)
        big = torch.randn((n,), generator=g, device="cuda").cpu()
        nxt = torch.randn((64,), generator=g, device="cuda").cpu()
        idx = torch.arange(0, n, 1171)
        tensors["rng.cuda_big.sample_idx"] = idx.to(torch.int64)
        tensors["rng.cuda_big.samples"] = big[idx].clone()
        tensors["rng.cuda_big.last256"] = big[-256:].clone()
        tensors["rng.cuda_big.next64"] = nxt
        out["cuda_big"] = dict(seed=123, numel=n, device=torch.cuda.get_device_name(0),
                               sm_count=p.multi_processor_count,
                               max_threads_per_sm=p.max_threads_per_multi_processor,
                               sum=float(big.double().sum()), sum_abs=float(big.double().abs().sum()))
    else:
        out["cuda_big"] = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    meta = {}
    diffusers, torch = import_diffusers(meta)
    import safetensors.torch as st
    meta.update(diffusers=diffusers.__version__, torch=torch.__version__, shape=list(SHAPE),
                model="out = x_in * a(t) + b(t) * p_i; a = 0.5 + 0.3 cos(0.003 t), b = 0.2 sin(0.002 t + 1), "
                      "p_i = sin(0.37 i + 0.1), a b p rounded to float32",
                image="0.6 cos(0.23 i)", mask="1 where (i % 4) < 2 over the 4x4 plane")
    torch.backends.cuda.matmul.allow_tf32 = False
    for spec in RUNS:  # import the lazily loaded scheduler modules before their randn_tensor is wrapped
        scheduler_class(diffusers, spec[2])
    getattr(diffusers, "EulerDiscreteScheduler")
    log = DrawLog(torch, diffusers)
    tensors, runs = {}, []
    for spec in RUNS:
        runs.append(run_one(diffusers, torch, log, spec, tensors))
        print(f"[ok] {spec[0]}: {runs[-1]['n_evals']} evaluations, {runs[-1]['n_step_draws']} step draws", flush=True)
    meta["runs"] = runs
    meta["rng"] = rng_facts(torch, tensors)
    os.makedirs(args.out, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, "sampler_refs.safetensors"))
    with open(os.path.join(args.out, "sampler_refs.json"), "w") as f:
        json.dump(meta, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, x)) for x in ("sampler_refs.safetensors", "sampler_refs.json"))
    print(f"wrote {args.out}/sampler_refs.{{safetensors,json}}: {total} bytes")
    if total > 200_000:
        print("WARNING: over the 200 kB budget for tests/data", file=sys.stderr)


if __name__ == "__main__":
    main()
