#!/usr/bin/env bash
# `rbee txt2img` and `rbee img2img` on the tiny SD3 pipeline
# (tests/data/sd3/pipelines/sd3): --no-t5 with diffusers' prompt, size,
# steps, guidance and max_sequence_length and --seed 1600 (the seed of the
# no-T5 run's starting noise; flow_euler draws nothing else) writes diffusers'
# PNG (bytes equal, or a few one off on rounding boundaries); with T5 the
# model loads and draws (the default sampler flow_euler in the infotext);
# img2img draws from an init image; the sampler list names flow_euler; bad
# --max-sequence-length is a usage error (exit 2).
# usage: test_sd3_cli.sh RBEE_BINARY SOURCE_DIR
set -u
RBEE=$1
SRC=$2
MODEL=$SRC/tests/data/sd3/pipelines/sd3
REFS=$SRC/tests/data/sd3/refs/sd3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# pngdiff GOT REF: the number of bytes off by one; exits 1 when any is off by more or the sizes differ.
cat > "$TMP/png.py" <<'PY'
import struct, sys, zlib
def pixels(path):
    d = open(path, 'rb').read()
    assert d[:8] == b'\x89PNG\r\n\x1a\n', path
    pos, idat = 8, b''
    while pos < len(d):
        n, = struct.unpack('>I', d[pos:pos + 4]); kind = d[pos + 4:pos + 8]; body = d[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b'IHDR': w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
        elif kind == b'IDAT': idat += body
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw, stride, rows, prev, p = zlib.decompress(idat), w * ch, bytearray(), bytearray(w * ch), 0
    for _ in range(h):
        f, line = raw[p], bytearray(raw[p + 1:p + 1 + stride]); p += 1 + stride
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0; b = prev[i]; c = prev[i - ch] if i >= ch else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows += line; prev = line
    return (w, h, ch), bytes(rows)
(s1, a), (s2, b) = pixels(sys.argv[1]), pixels(sys.argv[2])
if s1 != s2: print('size', s1, s2); sys.exit(1)
off = [abs(x - y) for x, y in zip(a, b) if x != y]
print(len(off)); sys.exit(1 if off and max(off) > 1 else 0)
PY

PROMPT="a red apple on a wooden table, studio light"
"$RBEE" txt2img -m "$MODEL" --no-t5 -p "$PROMPT" -n blurry -W 64 -H 64 --steps 4 --cfg 6 \
    --max-sequence-length 24 --seed 1600 -o "$TMP/no_t5.png" 2>"$TMP/err" || fail "no-T5 txt2img: $(cat "$TMP/err")"
if n=$(python3 "$TMP/png.py" "$TMP/no_t5.png" "$REFS/txt2img_flow_euler_no_t5.png"); then
    [ "$n" -le 20 ] && ok "--no-t5 txt2img gives diffusers' PNG ($n bytes one off)" || fail "no-T5: $n bytes one off"
else
    fail "no-T5 PNG differs from diffusers': $n"
fi
grep -q "sd3" "$TMP/err" && ok "the model is reported as sd3" || fail "no sd3 in: $(cat "$TMP/err")"

"$RBEE" txt2img -m "$MODEL" -p "$PROMPT" -W 64 -H 96 --steps 2 --seed 7 -q -o "$TMP/t5.png" 2>"$TMP/err" &&
    [ -s "$TMP/t5.png" ] && ok "txt2img with T5 (64x96)" || fail "txt2img with T5: $(cat "$TMP/err")"
strings "$TMP/t5.png" | grep -q "Sampler: Euler" && ok "infotext names the sampler" ||
    fail "infotext: $(strings "$TMP/t5.png" | grep Steps)"

"$RBEE" img2img -m "$MODEL" -p "$PROMPT" --init-image "$REFS/init_image.png" --strength 0.6 --steps 5 --seed 2700 \
    -q -o "$TMP/i2i.png" 2>"$TMP/err" && [ -s "$TMP/i2i.png" ] && ok "img2img" || fail "img2img: $(cat "$TMP/err")"

"$RBEE" txt2img --help 2>&1 | grep -q "flow_euler" && ok "--help lists flow_euler" || fail "--help"
"$RBEE" txt2img -m "$MODEL" -p x --max-sequence-length 0 -o "$TMP/x.png" 2>"$TMP/err"
[ $? = 2 ] && ok "--max-sequence-length 0: usage error" || fail "--max-sequence-length 0: $(cat "$TMP/err")"

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
