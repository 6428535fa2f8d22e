"""The three networks of an SD 1.x pipeline in plain PyTorch, with diffusers' / transformers' parameter
names, so that their state dicts ARE the diffusers folder layout.

Why: the default SD model is trained by this folder's own script on machines that may lack diffusers and
transformers (Debian ships python3-torch, not those). Only the SD 1.x variants used by the default model are
written: CLIPTextModel (quick_gelu, causal), UNet2DConditionModel with CrossAttnDownBlock2D / DownBlock2D /
UNetMidBlock2DCrossAttn / UpBlock2D / CrossAttnUpBlock2D (conv proj_in/proj_out, GEGLU feed-forward), and
AutoencoderKL with DownEncoderBlock2D / UpDecoderBlock2D and a mid-block attention. The behaviour follows the
published architecture definitions; `check_rbee.py` compares a saved model's image against rbee's, and the
GPU machine's diffusers check (`diffusers_check.py`) loads the folder in diffusers itself.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------------
# CLIP text encoder (transformers' CLIPTextModel layout: text_model.*)

class ClipAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.heads
        q = self.q_proj(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k_proj(x).view(b, t, h, d // h).transpose(1, 2)
        v = self.v_proj(x).view(b, t, h, d // h).transpose(1, 2)
        w = (q @ k.transpose(-1, -2)) / math.sqrt(d // h) + mask
        o = w.softmax(-1) @ v
        return self.out_proj(o.transpose(1, 2).reshape(b, t, d))


class ClipMlp(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x):
        x = self.fc1(x)
        return self.fc2(x * torch.sigmoid(1.702 * x))  # quick_gelu


class ClipLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(d, eps=1e-5)
        self.self_attn = ClipAttention(d, heads)
        self.layer_norm2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = ClipMlp(d, ff)

    def forward(self, x, mask):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        return x + self.mlp(self.layer_norm2(x))


class ClipEmbeddings(nn.Module):
    def __init__(self, vocab, d, positions):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, d)
        self.position_embedding = nn.Embedding(positions, d)


class ClipEncoder(nn.Module):
    def __init__(self, d, heads, ff, layers):
        super().__init__()
        self.layers = nn.ModuleList([ClipLayer(d, heads, ff) for _ in range(layers)])


class ClipTextTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.embeddings = ClipEmbeddings(cfg["vocab_size"], d, cfg["max_position_embeddings"])
        self.encoder = ClipEncoder(d, cfg["num_attention_heads"], cfg["intermediate_size"], cfg["num_hidden_layers"])
        self.final_layer_norm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embeddings.token_embedding(ids) + self.embeddings.position_embedding.weight[:t][None]
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1)
        for layer in self.encoder.layers:
            x = layer(x, mask)
        return self.final_layer_norm(x)


class ClipTextModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.text_model = ClipTextTransformer(cfg)

    def forward(self, ids):
        return self.text_model(ids)


def clip_config(vocab=49408, hidden=64, layers=3, heads=4, ff=256):
    return {
        "architectures": ["CLIPTextModel"], "model_type": "clip_text_model", "attention_dropout": 0.0,
        "bos_token_id": 49406, "eos_token_id": 49407, "pad_token_id": 49407, "hidden_act": "quick_gelu",
        "hidden_size": hidden, "initializer_factor": 1.0, "initializer_range": 0.02, "intermediate_size": ff,
        "layer_norm_eps": 1e-5, "max_position_embeddings": 77, "num_attention_heads": heads,
        "num_hidden_layers": layers, "projection_dim": hidden, "vocab_size": vocab, "torch_dtype": "float32",
    }


# ---------------------------------------------------------------------------------------------------------
# shared UNet / VAE pieces (diffusers' ResnetBlock2D, Downsample2D, Upsample2D)

class Resnet(nn.Module):
    def __init__(self, cin, cout, groups, eps, temb=None):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        if temb is not None:
            self.time_emb_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x, temb=None):
        h = self.conv1(F.silu(self.norm1(x)))
        if temb is not None:
            h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        if hasattr(self, "conv_shortcut"):
            x = self.conv_shortcut(x)
        return x + h


class Downsample(nn.Module):
    def __init__(self, c, padding):
        super().__init__()
        self.padding = padding
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=padding)

    def forward(self, x):
        if self.padding == 0:  # the VAE's asymmetric padding: one column / row at the right and bottom
            x = F.pad(x, (0, 1, 0, 1))
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def attention(q, k, v, heads):
    b, tq, d = q.shape
    tk = k.shape[1]
    q = q.view(b, tq, heads, d // heads).transpose(1, 2)
    k = k.view(b, tk, heads, d // heads).transpose(1, 2)
    v = v.view(b, tk, heads, d // heads).transpose(1, 2)
    w = (q @ k.transpose(-1, -2)) / math.sqrt(d // heads)
    return (w.softmax(-1) @ v).transpose(1, 2).reshape(b, tq, d)


# ---------------------------------------------------------------------------------------------------------
# UNet2DConditionModel (SD 1.x blocks)

class Attn(nn.Module):
    """diffusers' Attention as a transformer block uses it: q/k/v without bias, to_out.0 with bias."""

    def __init__(self, c, ctx, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(c, c, bias=False)
        self.to_k = nn.Linear(ctx, c, bias=False)
        self.to_v = nn.Linear(ctx, c, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x, ctx=None):
        ctx = x if ctx is None else ctx
        return self.to_out[0](attention(self.to_q(x), self.to_k(ctx), self.to_v(ctx), self.heads))


class GegluProj(nn.Module):
    def __init__(self, c, inner):
        super().__init__()
        self.proj = nn.Linear(c, inner * 2)

    def forward(self, x):
        h, gate = self.proj(x).chunk(2, dim=-1)
        return h * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.net = nn.ModuleList([GegluProj(c, 4 * c), nn.Dropout(0.0), nn.Linear(4 * c, c)])

    def forward(self, x):
        for m in self.net:
            x = m(x)
        return x


class TransformerBlock(nn.Module):
    def __init__(self, c, ctx, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(c, eps=1e-5)
        self.attn1 = Attn(c, c, heads)
        self.norm2 = nn.LayerNorm(c, eps=1e-5)
        self.attn2 = Attn(c, ctx, heads)
        self.norm3 = nn.LayerNorm(c, eps=1e-5)
        self.ff = FeedForward(c)

    def forward(self, x, ctx):
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), ctx)
        return x + self.ff(self.norm3(x))


class Transformer2D(nn.Module):
    def __init__(self, c, ctx, heads, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.proj_in = nn.Conv2d(c, c, 1)
        self.transformer_blocks = nn.ModuleList([TransformerBlock(c, ctx, heads)])
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        y = self.proj_in(self.norm(x)).permute(0, 2, 3, 1).reshape(b, h * w, c)
        for blk in self.transformer_blocks:
            y = blk(y, ctx)
        y = y.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return self.proj_out(y) + x


class DownBlock(nn.Module):
    def __init__(self, cin, cout, layers, temb, groups, ctx, heads, cross, down):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if i == 0 else cout, cout, groups, 1e-5, temb) for i in range(layers)])
        if cross:
            self.attentions = nn.ModuleList([Transformer2D(cout, ctx, heads, groups) for _ in range(layers)])
        if down:
            self.downsamplers = nn.ModuleList([Downsample(cout, 1)])

    def forward(self, x, temb, ctx):
        outs = []
        for i, r in enumerate(self.resnets):
            x = r(x, temb)
            if hasattr(self, "attentions"):
                x = self.attentions[i](x, ctx)
            outs.append(x)
        if hasattr(self, "downsamplers"):
            x = self.downsamplers[0](x)
            outs.append(x)
        return x, outs


class UpBlock(nn.Module):
    def __init__(self, cin, cprev, cout, layers, temb, groups, ctx, heads, cross, up):
        super().__init__()
        rs = []
        for i in range(layers + 1):
            skip = cin if i == layers else cout
            rs.append(Resnet((cprev if i == 0 else cout) + skip, cout, groups, 1e-5, temb))
        self.resnets = nn.ModuleList(rs)
        if cross:
            self.attentions = nn.ModuleList([Transformer2D(cout, ctx, heads, groups) for _ in range(layers + 1)])
        if up:
            self.upsamplers = nn.ModuleList([Upsample(cout)])

    def forward(self, x, skips, temb, ctx):
        for i, r in enumerate(self.resnets):
            x = r(torch.cat([x, skips.pop()], dim=1), temb)
            if hasattr(self, "attentions"):
                x = self.attentions[i](x, ctx)
        if hasattr(self, "upsamplers"):
            x = self.upsamplers[0](x)
        return x


class MidBlock(nn.Module):
    def __init__(self, c, temb, groups, ctx, heads):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(c, c, groups, 1e-5, temb), Resnet(c, c, groups, 1e-5, temb)])
        self.attentions = nn.ModuleList([Transformer2D(c, ctx, heads, groups)])

    def forward(self, x, temb, ctx):
        x = self.resnets[0](x, temb)
        x = self.attentions[0](x, ctx)
        return self.resnets[1](x, temb)


class TimeEmbedding(nn.Module):
    def __init__(self, c, temb):
        super().__init__()
        self.linear_1 = nn.Linear(c, temb)
        self.linear_2 = nn.Linear(temb, temb)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


def timestep_features(t, dim):
    """diffusers' Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    a = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=-1)


class UNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        boc = cfg["block_out_channels"]
        groups, layers, ctx = cfg["norm_num_groups"], cfg["layers_per_block"], cfg["cross_attention_dim"]
        heads = cfg["attention_head_dim"]  # diffusers' name for the number of heads
        temb = boc[0] * 4
        self.c0 = boc[0]
        self.conv_in = nn.Conv2d(cfg["in_channels"], boc[0], 3, padding=1)
        self.time_embedding = TimeEmbedding(boc[0], temb)
        downs, cin = [], boc[0]
        for i, kind in enumerate(cfg["down_block_types"]):
            downs.append(DownBlock(cin, boc[i], layers, temb, groups, ctx, heads, kind == "CrossAttnDownBlock2D",
                                   i < len(boc) - 1))
            cin = boc[i]
        self.down_blocks = nn.ModuleList(downs)
        self.mid_block = MidBlock(boc[-1], temb, groups, ctx, heads)
        rev, ups, prev = list(reversed(boc)), [], boc[-1]
        for i, kind in enumerate(cfg["up_block_types"]):
            cin = rev[min(i + 1, len(boc) - 1)]
            ups.append(UpBlock(cin, prev, rev[i], layers, temb, groups, ctx, heads, kind == "CrossAttnUpBlock2D",
                               i < len(boc) - 1))
            prev = rev[i]
        self.up_blocks = nn.ModuleList(ups)
        self.conv_norm_out = nn.GroupNorm(groups, boc[0], eps=cfg["norm_eps"])
        self.conv_out = nn.Conv2d(boc[0], cfg["out_channels"], 3, padding=1)

    def forward(self, x, t, ctx):
        temb = self.time_embedding(timestep_features(t, self.c0))
        x = self.conv_in(x)
        skips = [x]
        for blk in self.down_blocks:
            x, outs = blk(x, temb, ctx)
            skips += outs
        x = self.mid_block(x, temb, ctx)
        for blk in self.up_blocks:
            n = len(blk.resnets)
            x = blk(x, skips[-n:], temb, ctx)
            del skips[-n:]
        return self.conv_out(F.silu(self.conv_norm_out(x)))


def unet_config(channels=(32, 64, 64), layers=1, heads=4, ctx=64, groups=16, sample=16):
    return {
        "_class_name": "UNet2DConditionModel", "_diffusers_version": "0.30.0", "act_fn": "silu",
        "attention_head_dim": heads, "block_out_channels": list(channels), "center_input_sample": False,
        "cross_attention_dim": ctx,
        "down_block_types": ["CrossAttnDownBlock2D"] * (len(channels) - 1) + ["DownBlock2D"],
        "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4,
        "layers_per_block": layers, "mid_block_scale_factor": 1, "norm_eps": 1e-5, "norm_num_groups": groups,
        "out_channels": 4, "sample_size": sample,
        "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * (len(channels) - 1),
        "use_linear_projection": False, "upcast_attention": False, "only_cross_attention": False,
        "dual_cross_attention": False, "resnet_time_scale_shift": "default", "time_embedding_type": "positional",
        "mid_block_type": "UNetMidBlock2DCrossAttn", "conv_in_kernel": 3, "conv_out_kernel": 3,
    }


# ---------------------------------------------------------------------------------------------------------
# AutoencoderKL

class VaeAttn(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.group_norm(x).view(b, c, h * w).transpose(1, 2)
        y = self.to_out[0](attention(self.to_q(y), self.to_k(y), self.to_v(y), 1))
        return y.transpose(1, 2).reshape(b, c, h, w) + x


class VaeMid(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(c, c, groups, 1e-6), Resnet(c, c, groups, 1e-6)])
        self.attentions = nn.ModuleList([VaeAttn(c, groups)])

    def forward(self, x):
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class EncBlock(nn.Module):
    def __init__(self, cin, cout, layers, groups, down):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if i == 0 else cout, cout, groups, 1e-6) for i in range(layers)])
        if down:
            self.downsamplers = nn.ModuleList([Downsample(cout, 0)])

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        return self.downsamplers[0](x) if hasattr(self, "downsamplers") else x


class DecBlock(nn.Module):
    def __init__(self, cin, cout, layers, groups, up):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(cin if i == 0 else cout, cout, groups, 1e-6) for i in range(layers + 1)])
        if up:
            self.upsamplers = nn.ModuleList([Upsample(cout)])

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        return self.upsamplers[0](x) if hasattr(self, "upsamplers") else x


class Encoder(nn.Module):
    def __init__(self, boc, layers, groups, latent):
        super().__init__()
        self.conv_in = nn.Conv2d(3, boc[0], 3, padding=1)
        blocks, cin = [], boc[0]
        for i, c in enumerate(boc):
            blocks.append(EncBlock(cin, c, layers, groups, i < len(boc) - 1))
            cin = c
        self.down_blocks = nn.ModuleList(blocks)
        self.mid_block = VaeMid(boc[-1], groups)
        self.conv_norm_out = nn.GroupNorm(groups, boc[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(boc[-1], 2 * latent, 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(self.mid_block(x))))


class Decoder(nn.Module):
    def __init__(self, boc, layers, groups, latent):
        super().__init__()
        rev = list(reversed(boc))
        self.conv_in = nn.Conv2d(latent, rev[0], 3, padding=1)
        self.mid_block = VaeMid(rev[0], groups)
        blocks, cin = [], rev[0]
        for i, c in enumerate(rev):
            blocks.append(DecBlock(cin, c, layers, groups, i < len(boc) - 1))
            cin = c
        self.up_blocks = nn.ModuleList(blocks)
        self.conv_norm_out = nn.GroupNorm(groups, boc[0], eps=1e-6)
        self.conv_out = nn.Conv2d(boc[0], 3, 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Vae(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        boc, layers, groups, lat = cfg["block_out_channels"], cfg["layers_per_block"], cfg["norm_num_groups"], cfg["latent_channels"]
        self.encoder = Encoder(boc, layers, groups, lat)
        self.decoder = Decoder(boc, layers, groups, lat)
        self.quant_conv = nn.Conv2d(2 * lat, 2 * lat, 1)
        self.post_quant_conv = nn.Conv2d(lat, lat, 1)

    def encode(self, x):
        """mean and log-variance of the latent distribution (log-variance clamped as diffusers does)"""
        mean, logvar = self.quant_conv(self.encoder(x)).chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


def vae_config(channels=(32, 64, 64, 64), layers=1, groups=16, sample=128, scaling=1.0):
    return {
        "_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0", "act_fn": "silu",
        "block_out_channels": list(channels), "down_block_types": ["DownEncoderBlock2D"] * len(channels),
        "up_block_types": ["UpDecoderBlock2D"] * len(channels), "in_channels": 3, "out_channels": 3,
        "latent_channels": 4, "layers_per_block": layers, "norm_num_groups": groups, "sample_size": sample,
        "scaling_factor": scaling, "force_upcast": False, "mid_block_add_attention": True,
        "use_quant_conv": True, "use_post_quant_conv": True,
    }
