"""Writes and reads 8-bit RGB PNGs with the standard library only (zlib), for sample grids and checks."""
import struct
import zlib

import torch


def write_png(path, img):
    """img: float tensor [3, H, W] in [0, 1], or uint8 [H, W, 3]."""
    if img.dtype != torch.uint8:
        img = (img.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + bytes(img[y].contiguous().view(-1).tolist()) for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def grid(imgs, cols):
    """[N, 3, H, W] -> [3, rows*H, cols*W]"""
    n, c, h, w = imgs.shape
    rows = (n + cols - 1) // cols
    out = torch.ones(c, rows * h, cols * w)
    for i in range(n):
        out[:, (i // cols) * h:(i // cols + 1) * h, (i % cols) * w:(i % cols + 1) * w] = imgs[i]
    return out


def read_png(path):
    """uint8 tensor [H, W, 3] from an 8-bit RGB or RGBA, non-interlaced PNG (what rbee writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat = 8, b""
    while pos < len(data):
        n, tag = struct.unpack(">I", data[pos:pos + 4])[0], data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if tag == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif tag == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return torch.tensor(list(out), dtype=torch.uint8).view(h, w, bpp)[:, :, :3]
