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

    def diffusers(prompt, seed, size, ids):
        got = pipe.tokenizer(prompt, padding="max_length", max_length=77, return_tensors="pt").input_ids
        assert got.tolist() == ids.tolist(), "token ids differ"
        ref = pipe(prompt, num_inference_steps=args.steps, guidance_scale=args.cfg, height=size, width=size,
                   generator=torch.Generator("cpu").manual_seed(seed), output_type="np").images[0]
        return torch.from_numpy(ref * 255).round().to(torch.uint8)

    sys.exit(check_rbee.compare(args.model, args.steps, args.cfg, args.max_diff, diffusers, "diffusers"))


if __name__ == "__main__":
    main()
