#!/usr/bin/env python3
# Writes the small reference images of tests/image/ into tests/data/image/:
# PNGs made here byte by byte with Python's zlib (a PNG writer independent of
# libpng: every color type and bit depth, tRNS, Adam7 interlacing, all five
# row filters, text chunks before and after the image data), and JPEGs made
# with libjpeg-turbo's cjpeg from PPM/PGM files plus the djpeg decodes to
# compare with. Pixel values follow formulas the C test recomputes:
#   v8(x, y, c)  = (37x + 71y + 113c + 17) mod 256
#   v16(x, y, c) = 256 * v8 + (13x + 7y + c) mod 256
#   vbits(x, y)  = (x + 2y) mod 2^bits      (1/2/4-bit gray)
#   palette index (x + y) mod 16; entry i = (16i, 255 - 16i, 50i mod 256), alpha 60i for i < 4 when tRNS
# usage: python3 tests/image/gen_test_images.py [OUTDIR]   (needs cjpeg/djpeg: libjpeg-turbo-progs)
import os
import struct
import subprocess
import sys
import zlib

W, H = 13, 11  # odd sizes: Adam7 passes of uneven widths, partial bytes for 1/2/4-bit rows


def v8(x, y, c):
    return (37 * x + 71 * y + 113 * c + 17) % 256


def v16(x, y, c):
    return 256 * v8(x, y, c) + (13 * x + 7 * y + c) % 256


def chunk(t, data):
    c = struct.pack(">I", len(data)) + t + data
    return c + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def samples(ct, depth, x, y):
    """Sample values of pixel (x, y) for a color type / depth."""
    if ct == 3:
        return [(x + y) % 16]
    if ct == 0 and depth < 8:
        return [(x + 2 * y) % (1 << depth)]
    n = {0: 1, 2: 3, 4: 2, 6: 4}[ct]
    f = v16 if depth == 16 else v8
    return [f(x, y, c) for c in range(n)]


def pack_row(ct, depth, xs, y):
    if depth < 8:
        bits, out, acc, nb = depth, bytearray(), 0, 0
        for x in xs:
            acc = (acc << bits) | samples(ct, depth, x, y)[0]
            nb += bits
            if nb == 8:
                out.append(acc)
                acc, nb = 0, 0
        if nb:
            out.append(acc << (8 - nb))
        return bytes(out)
    out = bytearray()
    for x in xs:
        for s in samples(ct, depth, x, y):
            out += struct.pack(">H", s) if depth == 16 else bytes([s])
    return bytes(out)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def filter_rows(rows, bpp):
    """Filters each row with type (row index mod 5)."""
    out, prev = bytearray(), bytes(len(rows[0])) if rows else b""
    for i, r in enumerate(rows):
        ft = i % 5
        f = bytearray()
        for j, v in enumerate(r):
            a = r[j - bpp] if j >= bpp else 0
            b = prev[j]
            c = prev[j - bpp] if j >= bpp else 0
            pred = [0, a, b, (a + b) // 2, paeth(a, b, c)][ft]
            f.append((v - pred) & 0xFF)
        out += bytes([ft]) + f
        prev = r
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png(ct, depth, interlace=False, trns=None, plte=False, texts=(), texts_after=()):
    n = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]
    bpp = max(1, n * depth // 8)
    raw = b""
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (x0, y0, dx, dy) in passes:
        xs = list(range(x0, W, dx))
        ys = list(range(y0, H, dy))
        if not xs or not ys:
            continue
        raw += filter_rows([pack_row(ct, depth, xs, y) for y in ys], bpp)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, depth, ct, 0, 0, 1 if interlace else 0))
    for t in texts:
        out += chunk(*t)
    if plte:
        out += chunk(b"PLTE", b"".join(bytes([16 * i, 255 - 16 * i, (50 * i) % 256]) for i in range(16)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    z = zlib.compress(raw, 9)
    out += chunk(b"IDAT", z[: len(z) // 2]) + chunk(b"IDAT", z[len(z) // 2:])  # two IDATs
    for t in texts_after:
        out += chunk(*t)
    return out + chunk(b"IEND", b"")


def text_chunks():
    itxt = lambda k, t, comp: (b"iTXt", k + b"\0" + bytes([1 if comp else 0, 0]) + b"en\0" + b"\0" +
                               (zlib.compress(t.encode()) if comp else t.encode()))
    return ([(b"tEXt", b"parameters\0a cat, masterpiece\nSteps: 20, Sampler: Euler a, CFG scale: 7"),
             (b"zTXt", b"Comment\0\0" + zlib.compress("caf\u00e9 \u00bd".encode("latin-1"))),
             itxt(b"Title", "\u6771\u4eac \U0001F431", False),
             itxt(b"Description", "long \u00fcnic\u00f6de " * 50, True)],
            [(b"tEXt", b"After\0written after IDAT")])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "image")
    os.makedirs(out, exist_ok=True)
    files = {
        "gray1.png": png(0, 1), "gray2.png": png(0, 2), "gray4.png": png(0, 4), "gray8.png": png(0, 8),
        "gray16.png": png(0, 16), "graya8.png": png(4, 8), "graya16.png": png(4, 16),
        "rgb8.png": png(2, 8), "rgb16.png": png(2, 16), "rgba8.png": png(6, 8), "rgba16.png": png(6, 16),
        "pal8.png": png(3, 8, plte=True), "pal4_trns.png": png(3, 4, plte=True, trns=bytes([0, 60, 120, 180])),
        "gray8_trns.png": png(0, 8, trns=struct.pack(">H", v8(0, 0, 0))),
        "rgb8_trns.png": png(2, 8, trns=struct.pack(">HHH", v8(1, 1, 0), v8(1, 1, 1), v8(1, 1, 2))),
        "rgb8_adam7.png": png(2, 8, interlace=True), "gray1_adam7.png": png(0, 1, interlace=True),
        "rgba16_adam7.png": png(6, 16, interlace=True), "pal8_adam7.png": png(3, 8, interlace=True, plte=True),
    }
    before, after = text_chunks()
    files["text.png"] = png(2, 8, texts=before, texts_after=after)
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    # JPEG: a 24 x 16 picture of the same formula (smooth enough for JPEG), cjpeg'd three ways
    jw, jh = 24, 16
    rgb = bytes(v for y in range(jh) for x in range(jw) for v in ((8 * x + 3 * y) % 256, (5 * y + 2 * x) % 256, (x * y) % 256))
    gray = bytes((8 * x + 3 * y) % 256 for y in range(jh) for x in range(jw))
    src = os.path.join(out, "src.ppm")
    with open(src, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (jw, jh) + rgb)
    srcg = os.path.join(out, "src.pgm")
    with open(srcg, "wb") as f:
        f.write(b"P5\n%d %d\n255\n" % (jw, jh) + gray)
    jobs = [("rgb_q90.jpg", ["-quality", "90"], src), ("rgb_prog.jpg", ["-quality", "85", "-progressive"], src),
            ("gray_q90.jpg", ["-quality", "90", "-grayscale"], srcg)]
    for name, args, s in jobs:
        dst = os.path.join(out, name)
        subprocess.run(["cjpeg"] + args + ["-outfile", dst, s], check=True)
        ext = ".pgm" if "gray" in name else ".ppm"
        subprocess.run(["djpeg", "-pnm", "-outfile", dst[:-4] + ext, dst], check=True)
    os.remove(src)
    os.remove(srcg)


if __name__ == "__main__":
    main()
