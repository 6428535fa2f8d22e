"""Loads the trained folder in diffusers itself and checks that it draws what sdnets.py draws.

Why: the folder must be a real diffusers pipeline, not only something rbee reads. Run on the GPU machine,
where diffusers comes from ../shared/tools (see its README); on the CPU in float32, so the comparison is
exact up to summation order. With check_rbee.py (rbee == sdnets) this closes the loop: diffusers == sdnets
== rbee for the same prompt, seed, sampler, steps and guidance. Exits non-zero on a mismatch.

  PYTHONPATH=<diffusers>/src python3 diffusers_check.py MODEL_DIR [--steps 8] [--cfg 5]
"""
import argparse
import importlib.metadata
import sys

sys.modules.setdefault("importlib_metadata", importlib.metadata)  # diffusers imports this name

import torch  # noqa: E402

import check_rbee  # noqa: E402
import scenes  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--cfg", type=float, default=5.0)
    ap.add_argument("--max-diff", type=int, default=3, help="largest allowed per-channel difference (of 255)")
    args = ap.parse_args()
    from diffusers import StableDiffusionPipeline
    pipe = StableDiffusionPipeline.from_pretrained(args.model, torch_dtype=torch.float32, safety_checker=None,
                                                   requires_safety_checker=False)
    print("diffusers loaded:", type(pipe.scheduler).__name__, pipe.unet.config.block_out_channels,
          pipe.vae.config.scaling_factor)
    unet, te, vae, vcfg, ucfg, vocab = check_rbee.load(args.model)
    size = ucfg["sample_size"] * 8
    worst = 0
    for seed, prompt in ((7, "a red circle on a blue background"),
                         (8, "a yellow triangle above an orange square on a black background")):
        ids = pipe.tokenizer(prompt, padding="max_length", max_length=77, return_tensors="pt").input_ids
        assert ids.tolist() == scenes.clip_ids([prompt], vocab).tolist(), "token ids differ"
        ref = pipe(prompt, num_inference_steps=args.steps, guidance_scale=args.cfg, height=size, width=size,
                   generator=torch.Generator("cpu").manual_seed(seed), output_type="np").images[0]
        ref = torch.from_numpy(ref * 255).round().to(torch.uint8)
        mine = train.sample(unet, te, vae, vcfg, ids, scenes.clip_ids([""], vocab), args.steps, args.cfg, seed, size,
                            torch.device("cpu"))[0]
        mine = (mine * 255).round().to(torch.uint8).permute(1, 2, 0)
        d = (mine.int() - ref.int()).abs()
        print(f"seed {seed} '{prompt}': max |diff| {d.max().item()}, mean {d.float().mean().item():.4f}")
        worst = max(worst, d.max().item())
    print("diffusers matches" if worst <= args.max_diff else "MISMATCH")
    sys.exit(0 if worst <= args.max_diff else 1)


if __name__ == "__main__":
    main()
