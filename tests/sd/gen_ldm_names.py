#!/usr/bin/env python3
"""Reference layouts of single-file (original LDM / SGM) checkpoints, made by
diffusers' own conversion scripts, for test_sd_ldm.c.

Run on the GPU machine (it has torch and safetensors; no GPU is used) with the
diffusers source unpacked (../shared/tools/README.md):

  python3 tests/sd/gen_ldm_names.py --diffusers /tmp/dfs/diffusers-src \
      --fixtures <fixtures>/diffusers/pipelines --out tests/data/sd/ldm_names.json

For the sd21v and sdxl fixture pipelines it converts every component with the
scripts' functions (SD 2.x: convert_unet_state_dict, convert_vae_state_dict,
convert_text_enc_state_dict_v20; SDXL: the sdxl script's unet, vae and
openclip functions, and the "conditioner.embedders.0.transformer." prefix for
the first encoder, as that script does), then records for every converted
tensor where its values come from: one diffusers tensor as it is ("copy",
also when only the shape differs), three stacked on dim 0 ("cat"), or one
transposed ("transpose"). Sources are found by the tensors' bytes (the
weights are random, so each tensor is unique)."""
import argparse
import hashlib
import importlib.util
import json
import os
import sys

import torch
from safetensors.torch import load_file


def load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def digest(t):
    return hashlib.sha256(t.detach().contiguous().float().numpy().tobytes()).hexdigest()


def resolve(p):
    """The fixtures keep shared files as small text stubs holding a relative path."""
    if os.path.getsize(p) < 512:
        with open(p, "rb") as f:
            target = f.read().decode().strip()
        return resolve(os.path.normpath(os.path.join(os.path.dirname(p), target)))
    return p


def component(pdir, comp):
    d = os.path.join(pdir, comp)
    for f in ("diffusion_pytorch_model.safetensors", "model.safetensors"):
        p = os.path.join(d, f)
        if os.path.exists(p):
            return load_file(resolve(p))
    raise FileNotFoundError(d)


def describe(converted, sources):
    """converted: ldm name -> tensor; sources: list of (component, dict)."""
    index = {}
    for comp, sd in sources:
        for k, v in sd.items():
            index.setdefault(digest(v), []).append(f"{comp}/{k}")
    out = []
    for k, v in sorted(converted.items()):
        v = v.detach()
        e = {"name": k, "shape": list(v.shape)}
        h = digest(v)
        if h in index:
            e.update(op="copy", src=index[h][:1])
        elif v.dim() >= 1 and v.shape[0] % 3 == 0 and all(digest(c) in index for c in torch.chunk(v, 3, 0)):
            e.update(op="cat", src=[index[digest(c)][0] for c in torch.chunk(v, 3, 0)])
        elif v.dim() == 2 and digest(v.t()) in index:
            e.update(op="transpose", src=index[digest(v.t())][:1])
        else:
            raise SystemExit(f"no source found for {k} {tuple(v.shape)}")
        out.append(e)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffusers", required=True, help="the unpacked diffusers source (with scripts/)")
    ap.add_argument("--fixtures", required=True, help="fixtures/diffusers/pipelines")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.diffusers, "src"))
    sd = load_script(os.path.join(a.diffusers, "scripts", "convert_diffusers_to_original_stable_diffusion.py"), "cv_sd")
    xl = load_script(os.path.join(a.diffusers, "scripts", "convert_diffusers_to_original_sdxl.py"), "cv_xl")
    result = {"generator": "tests/sd/gen_ldm_names.py", "torch": torch.__version__, "pipelines": {}}

    p = os.path.join(a.fixtures, "sd21v")
    unet, vae, te = component(p, "unet"), component(p, "vae"), component(p, "text_encoder")
    conv = {}
    conv.update({"model.diffusion_model." + k: v for k, v in sd.convert_unet_state_dict(dict(unet)).items()})
    v = sd.convert_vae_state_dict(dict(vae))
    conv.update({"first_stage_model." + k: t for k, t in v.items()})
    t = sd.convert_text_enc_state_dict_v20(dict(te))
    conv.update({"cond_stage_model.model." + k: x for k, x in t.items()})
    result["pipelines"]["sd21v"] = describe(conv, [("unet", unet), ("vae", vae), ("text_encoder", te)])

    p = os.path.join(a.fixtures, "sdxl")
    unet, vae = component(p, "unet"), component(p, "vae")
    te, te2 = component(p, "text_encoder"), component(p, "text_encoder_2")
    conv = {}
    conv.update({"model.diffusion_model." + k: v for k, v in xl.convert_unet_state_dict(dict(unet)).items()})
    v = xl.convert_vae_state_dict(dict(vae))
    conv.update({"first_stage_model." + k: t for k, t in v.items()})
    conv.update({"conditioner.embedders.0.transformer." + k: x for k, x in te.items()})
    t2 = xl.convert_openclip_text_enc_state_dict(dict(te2))
    conv.update({"conditioner.embedders.1.model." + k: x for k, x in t2.items()})
    result["pipelines"]["sdxl"] = describe(conv, [("unet", unet), ("vae", vae), ("text_encoder", te),
                                                 ("text_encoder_2", te2)])
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=0)
    print({k: len(v) for k, v in result["pipelines"].items()})


if __name__ == "__main__":
    main()
