"""Writes tests/data/sd/taesd/: small random-weight TAESD decoders and their outputs, for test_sd_taesd.

Why: rbee's TAESD decoder (src/sd/taesd.c) needs references it cannot derive from itself. The decoder here is
written from the published TAESD structure (tanh(z/3)*3, conv + ReLU, stages of ReLU residual blocks, nearest
2x + bias-free conv between stages, a biased 3-channel conv at the end) and evaluated in float64 from the
stored float32 weights, so rbee's float32 result must agree to summation-order error. With diffusers
importable (the GPU machine, PYTHONPATH=<diffusers>/src), it also loads the AutoencoderTiny folder into
diffusers and checks that diffusers' decode equals 2 x the reference - 1.

  python3 tests/sd/gen_taesd_refs.py [OUT_DIR]      (default tests/data/sd/taesd; needs torch)
"""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "sd", "taesd")


def save(path, tensors):
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        t = tensors[k].detach().float().contiguous()
        b = t.numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make(latent, ch, stages, seed):
    """weights under the original names (Sequential index 0 = the clamp): {name: tensor}"""
    g = torch.Generator().manual_seed(seed)

    def conv(cin, cout, bias=True):
        w = torch.randn(cout, cin, 3, 3, generator=g) * (1.0 / (9 * cin)) ** 0.5
        return (w, torch.randn(cout, generator=g) * 0.1 if bias else None)

    w, i = {}, 1
    w[f"{i}.weight"], w[f"{i}.bias"] = conv(latent, ch)
    i += 2  # the ReLU
    for s, nb in enumerate(stages):
        for _ in range(nb):
            for k in (0, 2, 4):
                w[f"{i}.conv.{k}.weight"], w[f"{i}.conv.{k}.bias"] = conv(ch, ch)
            i += 1
        if s < len(stages) - 1:
            w[f"{i + 1}.weight"] = conv(ch, ch, bias=False)[0]
            i += 2
        else:
            w[f"{i}.weight"], w[f"{i}.bias"] = conv(ch, 3)
    return w


def decode(w, z, stages):
    """float64 reference of the original decoder on weights w (original names)"""
    d = {k: v.double() for k, v in w.items()}
    x = torch.tanh(z.double() / 3) * 3
    x = F.relu(F.conv2d(x, d["1.weight"], d["1.bias"], padding=1))
    i = 3
    for s, nb in enumerate(stages):
        for _ in range(nb):
            h = F.relu(F.conv2d(x, d[f"{i}.conv.0.weight"], d[f"{i}.conv.0.bias"], padding=1))
            h = F.relu(F.conv2d(h, d[f"{i}.conv.2.weight"], d[f"{i}.conv.2.bias"], padding=1))
            h = F.conv2d(h, d[f"{i}.conv.4.weight"], d[f"{i}.conv.4.bias"], padding=1)
            x = F.relu(h + x)
            i += 1
        if s < len(stages) - 1:
            x = F.conv2d(F.interpolate(x, scale_factor=2.0, mode="nearest"), d[f"{i + 1}.weight"], padding=1)
            i += 2
        else:
            x = F.conv2d(x, d[f"{i}.weight"], d[f"{i}.bias"], padding=1)
    return x


def main():
    os.makedirs(os.path.join(OUT, "tiny_ae"), exist_ok=True)
    refs = {}
    # A: the published structure (stages 3, 3, 3, 1; 4 latent channels) at 8 channels
    stA = (3, 3, 3, 1)
    wA = make(4, 8, stA, 11)
    save(os.path.join(OUT, "taesd_decoder.safetensors"), wA)
    # the same weights as diffusers' AutoencoderTiny names them: decoder.layers.<index - 1>
    save(os.path.join(OUT, "tiny_ae", "diffusion_pytorch_model.safetensors"),
         {"decoder.layers.%d.%s" % (int(k.split(".", 1)[0]) - 1, k.split(".", 1)[1]): v for k, v in wA.items()})
    json.dump({"_class_name": "AutoencoderTiny", "act_fn": "relu", "decoder_block_out_channels": [8, 8, 8, 8],
               "encoder_block_out_channels": [8, 8, 8, 8], "force_upcast": False, "in_channels": 3,
               "latent_channels": 4, "latent_magnitude": 3, "latent_shift": 0.5, "num_decoder_blocks": [3, 3, 3, 1],
               "num_encoder_blocks": [1, 3, 3, 3], "out_channels": 3, "scaling_factor": 1.0,
               "upsample_fn": "nearest", "upsampling_scaling_factor": 2},
              open(os.path.join(OUT, "tiny_ae", "config.json"), "w"), indent=2)
    g = torch.Generator().manual_seed(12)
    zA = torch.randn(2, 4, 5, 7, generator=g) * 3  # non-square, beyond the tanh clamp's knee
    refs["a_latents"], refs["a_image"] = zA, decode(wA, zA, stA).float()
    # B: another layout read from the tensors: 16 latent channels (as TAESD3), stages 1, 2, 6 channels
    stB = (1, 2)
    wB = make(16, 6, stB, 21)
    save(os.path.join(OUT, "taesd16_decoder.safetensors"), wB)
    zB = torch.randn(1, 16, 3, 4, generator=g)
    refs["b_latents"], refs["b_image"] = zB, decode(wB, zB, stB).float()
    save(os.path.join(OUT, "refs.safetensors"), refs)
    print({k: tuple(v.shape) for k, v in refs.items()}, "image A range", refs["a_image"].min().item(),
          refs["a_image"].max().item())
    try:
        import importlib.metadata
        sys.modules.setdefault("importlib_metadata", importlib.metadata)
        from diffusers import AutoencoderTiny
    except ImportError:
        print("diffusers not importable: the AutoencoderTiny cross-check was skipped")
        return
    ae = AutoencoderTiny.from_pretrained(os.path.join(OUT, "tiny_ae"), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        got = ae.decode(zA).sample
    diff = (got - (2 * refs["a_image"] - 1)).abs().max().item()
    print(f"diffusers AutoencoderTiny.decode vs 2 x reference - 1: max |diff| {diff:.3g}")
    sys.exit(0 if diff < 1e-4 else 1)


if __name__ == "__main__":
    main()
