#!/usr/bin/env bash
# `rbee txt2img / img2img / inpaint / bench-sd` end to end on the diffusers
# fixtures: the real binary writes PNGs whose pixels are compared with the
# fixture PNGs of the same runs (equal, or a few bytes one off where
# diffusers' float image sits on a rounding boundary; the exact numbers are
# test_sd_pipeline's business) and whose AUTOMATIC1111 "parameters" text is
# compared character for character. Runs that draw everything from --seed
# reproduce the fixture runs whose separate latents seed is that seed and
# which draw nothing else (euler, ddim, dpmpp_2m: txt2img; img2img draws
# its posterior sample and noise from the run's generator). Also: the
# single file with --config-dir and its f32 GGUF (`rbee convert`) give the
# folder's PNG byte for byte,
# batches, inpainting, a random seed, bench-sd's JSON, and usage errors
# (exit status 2) and runtime errors (1) with their messages.
# usage: test_sd_cli.sh RBEE_BINARY FIXTURES_DIR
set -u
RBEE=$1
FIX=$2/diffusers
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# A loadable copy of a fixture pipeline: the fixtures keep files shared
# between pipelines as small text files holding the real file's relative path.
mirror() {
    local src=$FIX/pipelines/$1 dst=$TMP/$1 f rel t
    mkdir -p "$dst"
    (cd "$src" && find . -type d) | while read -r d; do mkdir -p "$dst/$d"; done
    (cd "$src" && find . -type f) | while read -r rel; do
        f=$src/$rel
        t=$f
        if [ "$(stat -c %s "$f")" -lt 512 ] && [ "$(head -c 3 "$f")" = "../" ]; then t=$(dirname "$f")/$(cat "$f"); fi
        ln -s "$(readlink -f "$t")" "$dst/$rel"
    done
}

# pngcheck GOT.png REF.png MAX_OFF_BY_ONE: prints the parameters text of GOT.png
# to $TMP/params.txt; fails when a byte differs by more than 1 or too many by 1.
cat > "$TMP/png.py" <<'EOF'
import struct, sys, zlib
def read(path):
    d = open(path, 'rb').read()
    if d[:8] != b'\x89PNG\r\n\x1a\n': raise SystemExit(path + ': not a PNG')
    pos, idat, texts, hdr = 8, b'', {}, None
    while pos < len(d):
        n, = struct.unpack('>I', d[pos:pos + 4]); t = d[pos + 4:pos + 8]; body = d[pos + 8:pos + 8 + n]; pos += 12 + n
        if t == b'IHDR': hdr = struct.unpack('>IIBBBBB', body)
        elif t == b'IDAT': idat += body
        elif t == b'tEXt':
            k, v = body.split(b'\0', 1); texts[k.decode('latin-1')] = v.decode('latin-1')
        elif t == b'iTXt':
            k, rest = body.split(b'\0', 1); comp = rest[0]; rest = rest[2:]
            _, rest = rest.split(b'\0', 1); _, v = rest.split(b'\0', 1)
            texts[k.decode('latin-1')] = (zlib.decompress(v) if comp else v).decode('utf-8')
    w, h, depth, ctype, _, _, interlace = hdr
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    if depth != 8 or interlace: raise SystemExit(path + ': unsupported PNG layout')
    raw, stride, out, prev, p = zlib.decompress(idat), w * ch, bytearray(), bytearray(w * ch), 0
    for _ in range(h):
        f = raw[p]; line = bytearray(raw[p + 1:p + 1 + stride]); p += 1 + stride
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0; b = prev[i]; c = prev[i - ch] if i >= ch else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line; prev = line
    return w, h, ch, bytes(out), texts
got, ref, max_off, params_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
gw, gh, gc, gp, gt = read(got)
open(params_out, 'w', encoding='utf-8').write(gt.get('parameters', '<none>'))
if ref != '-':
    rw, rh, rc, rp, _ = read(ref)
    if (gw, gh, gc) != (rw, rh, rc): raise SystemExit('size %dx%dx%d vs %dx%dx%d' % (gw, gh, gc, rw, rh, rc))
    diffs = [abs(a - b) for a, b in zip(gp, rp) if a != b]
    if diffs and max(diffs) > 1: raise SystemExit('pixel off by %d' % max(diffs))
    if len(diffs) > max_off: raise SystemExit('%d bytes off by one (at most %d)' % (len(diffs), max_off))
    print('%dx%d: %d of %d bytes off by one' % (gw, gh, len(diffs), len(gp)))
EOF

# check_png GOT REF EXPECTED_PARAMETERS
check_png() {
    local msg
    if ! msg=$(python3 "$TMP/png.py" "$1" "$2" 8 "$TMP/params.txt" 2>&1); then
        fail "$1 vs $2: $msg"
        return
    fi
    if [ "$(cat "$TMP/params.txt")" != "$3" ]; then
        fail "$1: parameters text differs:"
        echo "  got:      $(cat "$TMP/params.txt")"
        echo "  expected: $3"
        return
    fi
    ok "$1 = $2 ($msg), parameters text exact"
}

# expect_status STATUS NEEDLE -- ARGS...: runs rbee, checks the exit status and that stderr holds NEEDLE.
expect_status() {
    local want=$1 needle=$2
    shift 3
    "$RBEE" "$@" > "$TMP/out.txt" 2> "$TMP/err.txt"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail "rbee $* -> exit $got, expected $want: $(head -c 300 "$TMP/err.txt")"
    elif ! grep -qF -- "$needle" "$TMP/err.txt"; then
        fail "rbee $*: stderr lacks '$needle': $(head -c 300 "$TMP/err.txt")"
    else
        ok "rbee $* -> $want ($(grep -F -- "$needle" "$TMP/err.txt" | head -1 | cut -c1-120))"
    fi
}

mirror sd15
mirror sdxl
mirror sd15-inpaint
R=$FIX/refs
P15="a photograph of an astronaut riding a horse, highly detailed"
N15="blurry, low quality"
COMMON=(-p "$P15" -n "$N15" --steps 4 --cfg 6 -q)

# txt2img, the fixture runs whose noise is all from the seed
"$RBEE" txt2img -m "$TMP/sd15" "${COMMON[@]}" --sampler euler --seed 1000 -o "$TMP/euler.png" > /dev/null ||
    fail "txt2img euler"
check_png "$TMP/euler.png" "$R/sd15/txt2img_euler.png" "$P15
Negative prompt: $N15
Steps: 4, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 1000, Size: 64x64, Model: sd15, RNG: CPU"
"$RBEE" txt2img -m "$TMP/sd15" "${COMMON[@]}" --sampler dpmpp_2m_karras --seed 1000 -o "$TMP/dpm.png" > /dev/null ||
    fail "txt2img dpmpp_2m_karras"
check_png "$TMP/dpm.png" "$R/sd15/txt2img_dpmpp_2m_karras.png" "$P15
Negative prompt: $N15
Steps: 4, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6, Seed: 1000, Size: 64x64, Model: sd15, RNG: CPU"
"$RBEE" txt2img -m "$TMP/sd15" "${COMMON[@]}" --sampler ddim --seed 1001 -W 96 -H 64 -o "$TMP/wide.png" > /dev/null ||
    fail "txt2img 96x64"
check_png "$TMP/wide.png" - "$P15
Negative prompt: $N15
Steps: 4, Sampler: DDIM, Schedule type: Automatic, CFG scale: 6, Seed: 1001, Size: 96x64, Model: sd15, RNG: CPU"
"$RBEE" txt2img -m "$TMP/sd15" "${COMMON[@]}" --sampler euler --seed 1001 -W 96 -H 64 -o "$TMP/wide.png" > /dev/null ||
    fail "txt2img euler 96x64"
check_png "$TMP/wide.png" "$R/sd15/txt2img_euler_64x96.png" "$P15
Negative prompt: $N15
Steps: 4, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 1001, Size: 96x64, Model: sd15, RNG: CPU"

# img2img: posterior sample, then noise, from the run's generator
"$RBEE" img2img -m "$TMP/sd15" -p "$P15" -n "$N15" --steps 5 --cfg 6 --strength 0.6 --sampler euler --seed 2100 \
    --init-image "$R/sd15/init_image.png" -q -o "$TMP/i2i.png" > /dev/null || fail "img2img"
check_png "$TMP/i2i.png" "$R/sd15/img2img_euler.png" "$P15
Negative prompt: $N15
Steps: 5, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 2100, Size: 64x64, Model: sd15, Denoising strength: 0.6, RNG: CPU"

# SDXL
PXL="a cinematic photo of a lighthouse on a cliff during a storm"
NXL="lowres, bad anatomy"
"$RBEE" txt2img -m "$TMP/sdxl" -p "$PXL" -n "$NXL" --steps 4 --cfg 6 --sampler euler --seed 1200 -q -o "$TMP/xl.png" \
    > /dev/null || fail "sdxl txt2img"
check_png "$TMP/xl.png" "$R/sdxl/txt2img_euler.png" "$PXL
Negative prompt: $NXL
Steps: 4, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 1200, Size: 64x64, Model: sdxl, RNG: CPU"

# the single file with the folder's configs: the same PNG, byte for byte (same model name: sd15)
"$RBEE" txt2img -m "$FIX/single_file/sd15.safetensors" --config-dir "$TMP/sd15" "${COMMON[@]}" --sampler euler \
    --seed 1000 -o "$TMP/single.png" > /dev/null || fail "single file"
if cmp -s "$TMP/single.png" "$TMP/euler.png"; then ok "single file = folder, byte for byte"; else fail "single file PNG differs"; fi

# `rbee convert` to an f32 GGUF and txt2img from it: the folder's PNG byte for
# byte (the file carries the configs, scheduler, pad tokens and default size)
"$RBEE" convert "$TMP/sd15" -o "$TMP/sd15.gguf" --type f32 --quiet || fail "convert sd15"
"$RBEE" txt2img -m "$TMP/sd15.gguf" "${COMMON[@]}" --sampler euler --seed 1000 -o "$TMP/gguf.png" > /dev/null ||
    fail "txt2img from GGUF"
if cmp -s "$TMP/gguf.png" "$TMP/euler.png"; then ok "GGUF = folder, byte for byte"; else fail "GGUF PNG differs"; fi
"$RBEE" convert "$TMP/sdxl" -o "$TMP/sdxl.gguf" --type f32 --quiet || fail "convert sdxl"
"$RBEE" txt2img -m "$TMP/sdxl.gguf" -p "$PXL" -n "$NXL" --steps 4 --cfg 6 --sampler euler --seed 1200 -q \
    -o "$TMP/xlg.png" > /dev/null || fail "sdxl txt2img from GGUF"
if cmp -s "$TMP/xlg.png" "$TMP/xl.png"; then ok "SDXL GGUF = folder, byte for byte"; else fail "SDXL GGUF PNG differs"; fi

# a batch: numbered files, one seed, batch keys; the GPU generator drops the RNG key
"$RBEE" txt2img -m "$TMP/sd15" "${COMMON[@]}" --sampler euler --seed 7 --batch 2 --rng cuda --clip-skip 1 \
    -o "$TMP/b.png" > "$TMP/list.txt" || fail "batch"
if [ "$(cat "$TMP/list.txt")" = "$TMP/b-0.png
$TMP/b-1.png" ]; then ok "batch files listed"; else fail "batch file list: $(cat "$TMP/list.txt")"; fi
check_png "$TMP/b-1.png" - "$P15
Negative prompt: $N15
Steps: 4, Sampler: Euler, Schedule type: Automatic, CFG scale: 6, Seed: 7, Size: 64x64, Model: sd15, Clip skip: 2, Batch size: 2, Batch pos: 1"
if cmp -s "$TMP/b-0.png" "$TMP/b-1.png"; then fail "batch images are equal"; else ok "batch images differ"; fi

# inpainting with a 9-channel UNet (a grayscale mask PNG)
"$RBEE" inpaint -m "$TMP/sd15-inpaint" -p "a wooden bench in a park" --steps 4 --cfg 6 --seed 5 --sampler ddim \
    --init-image "$R/sd15-inpaint/init_image.png" --mask "$R/sd15-inpaint/mask.png" -q -o "$TMP/inp.png" > /dev/null ||
    fail "inpaint"
check_png "$TMP/inp.png" - "a wooden bench in a park
Steps: 4, Sampler: DDIM, Schedule type: Automatic, CFG scale: 6, Seed: 5, Size: 64x64, Model: sd15-inpaint, Denoising strength: 1, RNG: CPU"

# a random seed is printed and written
"$RBEE" txt2img -m "$TMP/sd15" -p "x" --steps 1 -o "$TMP/r.png" > /dev/null 2> "$TMP/err.txt" || fail "random seed run"
seed=$(grep -o 'seed [0-9]*' "$TMP/err.txt" | head -1 | cut -d' ' -f2)
python3 "$TMP/png.py" "$TMP/r.png" - 0 "$TMP/params.txt" > /dev/null
if [ -n "$seed" ] && grep -q "Seed: $seed," "$TMP/params.txt"; then ok "random seed $seed printed and written"; else
    fail "random seed: '$seed' vs $(cat "$TMP/params.txt")"; fi

# usage errors (exit 2) and runtime errors (exit 1)
expect_status 2 "Usage: rbee <command>" --
expect_status 2 "-p PROMPT is required" -- txt2img -m "$TMP/sd15"
# without -m: the bundled default model, or the reason there is none
RBEE_DEFAULT_SD_MODEL=$TMP/no-such-model expect_status 2 \
    "no -m MODEL and no default model: RBEE_DEFAULT_SD_MODEL=$TMP/no-such-model does not exist" -- txt2img -p x
expect_status 1 "is not a Stable Diffusion model" -- txt2img -m "$2/llamacpp/tiny-f32.gguf" -p x -o "$TMP/x.png"
expect_status 2 "--init-image is required" -- img2img -m "$TMP/sd15" -p x
expect_status 2 "--mask is required" -- inpaint -m "$TMP/sd15" -p x --init-image "$R/sd15/init_image.png"
expect_status 2 "txt2img takes no --init-image" -- txt2img -m "$TMP/sd15" -p x --init-image "$R/sd15/init_image.png"
expect_status 2 "img2img takes no --mask" -- img2img -m "$TMP/sd15" -p x --init-image a.png --mask b.png
expect_status 2 "--steps" -- txt2img -m "$TMP/sd15" -p x --steps 0
expect_status 2 "--cfg" -- txt2img -m "$TMP/sd15" -p x --cfg abc
expect_status 2 "--dtype must be f32, f16 or bf16" -- txt2img -m "$TMP/sd15" -p x --dtype q4_0
expect_status 2 "--act-dtype must be f32, f16 or bf16" -- txt2img -m "$TMP/sd15" -p x --act-dtype q8_0
expect_status 2 "--rng" -- txt2img -m "$TMP/sd15" -p x --rng tpu
expect_status 2 "--prediction" -- txt2img -m "$TMP/sd15" -p x --prediction x0
expect_status 2 "--vae-tiling" -- txt2img -m "$TMP/sd15" -p x --vae-tiling maybe
expect_status 2 "unexpected argument" -- txt2img -m "$TMP/sd15" -p x stray
expect_status 2 "usage: rbee txt2img" -- txt2img --bogus
expect_status 1 "samplers: euler, euler_a" -- txt2img -m "$TMP/sd15" -p x --sampler plms -q
expect_status 1 "not a multiple of 8" -- txt2img -m "$TMP/sd15" -p x -W 60 -q
expect_status 1 "resize the image" -- img2img -m "$TMP/sd15" -p x -W 128 --init-image "$R/sd15/init_image.png" -q
expect_status 1 "cannot open" -- img2img -m "$TMP/sd15" -p x --init-image "$TMP/none.png" -q
expect_status 1 "not a PNG" -- img2img -m "$TMP/sd15" -p x --init-image "$TMP/png.py" -q
expect_status 1 "no such file" -- txt2img -m "$TMP/nothing" -p x -q
expect_status 1 "inpainting model" -- txt2img -m "$TMP/sd15-inpaint" -p x -q
expect_status 1 "cannot write" -- txt2img -m "$TMP/sd15" -p x --steps 1 -q -o "$TMP/no/such/dir.png"
expect_status 2 "one of --random sd15|sd21|sdxl|sd3m|sd35m or --random-from DIR is required" -- bench-sd
expect_status 1 "unknown random model" -- bench-sd --random sd3
expect_status 2 "multiples of 64" -- bench-sd --random sd15 -W 100

# bench-sd at the real SD 1.5 shapes, kept short: a 64x64 image, one step
if "$RBEE" bench-sd --random sd15 --steps 1 -W 64 -H 64 --reps 1 --json > "$TMP/bench.json" 2> "$TMP/err.txt" &&
    python3 - "$TMP/bench.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r['model'] == 'sd15' and r['width'] == 64 and r['steps'] == 1, r
assert r['unet_batch2_ms_median'] > 0 and r['image_ms'] > 0 and r['decode_ms'] > 0, r
assert 1.5e9 < r['weight_bytes'] < 3e9, r  # 1.07 billion parameters, f16 matrices
assert r['peak_mem_used_bytes'] > 0, r
print('bench-sd sd15: UNet %.0f ms, image %.0f ms' % (r['unet_batch2_ms_median'], r['image_ms']))
EOF
then ok "bench-sd --json"; else fail "bench-sd: $(cat "$TMP/err.txt" "$TMP/bench.json" | head -c 400)"; fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all passed"
