"""Checks that rbee draws the same picture as this folder's PyTorch definition of a saved model.

Why: the networks in sdnets.py mirror diffusers' by name and behaviour; rbee's SD engine is itself matched
to diffusers stage by stage (tests/sd). If `rbee txt2img` on the saved folder gives the image that
sdnets.py + train.sample give for the same prompt, seed, steps and guidance, the folder is a valid SD 1.x
pipeline as rbee reads it and the two definitions agree. Exits non-zero on a mismatch.

  python3 check_rbee.py MODEL_DIR RBEE_BINARY [--steps 8] [--cfg 5]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

import pngio
import scenes
import sdnets
import train


PROMPTS = ((7, "a red circle on a blue background"),
           (8, "a yellow triangle above an orange square on a black background"))


def compare(model_dir, steps, cfg, max_diff, other, label):
    """sdnets.py's picture of each of PROMPTS (Euler, `steps` steps, guidance cfg) against other(prompt, seed,
    size, ids), a uint8 [H, W, 3] image; prints each difference, returns the exit status (0: all within max_diff)."""
    torch.set_num_threads(2)
    unet, te, vae, vcfg, ucfg, _, vocab = train.load_folder(model_dir)
    size = ucfg["sample_size"] * 8
    worst = 0
    for seed, prompt in PROMPTS:
        ids = scenes.clip_ids([prompt], vocab)
        mine = train.sample(unet, te, vae, vcfg, ids, scenes.clip_ids([""], vocab), steps, cfg, seed, size,
                            torch.device("cpu"))[0]
        mine = (mine * 255).round().to(torch.uint8).permute(1, 2, 0)
        d = (mine.int() - other(prompt, seed, size, ids).int()).abs()
        print(f"seed {seed} '{prompt}': max |diff| {d.max().item()}, mean {d.float().mean().item():.4f}")
        worst = max(worst, d.max().item())
    print(f"{label} matches" if worst <= max_diff else "MISMATCH")
    return 0 if worst <= max_diff else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("rbee")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--cfg", type=float, default=5.0)
    ap.add_argument("--max-diff", type=int, default=3, help="largest allowed per-channel difference (of 255)")
    args = ap.parse_args()

    def rbee(prompt, seed, size, ids):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.png")
            subprocess.run([args.rbee, "txt2img", "-m", args.model, "-p", prompt, "--seed", str(seed), "--steps",
                            str(args.steps), "--cfg", str(args.cfg), "--sampler", "euler", "-q", "-o", out], check=True)
            return pngio.read_png(out)

    sys.exit(compare(args.model, args.steps, args.cfg, args.max_diff, rbee, "rbee"))


if __name__ == "__main__":
    main()
