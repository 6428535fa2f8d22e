/* The IQ formats against llama.cpp: every quantized tensor of the tiny model
 * llama-quantize --pure wrote in iq4_nl and iq4_xs, and ggml's quantizer in
 * iq2_xxs, iq2_xs, iq2_s, iq1_s and iq1_m (iq_model.c; tests/data/llamacpp), decodes to exactly
 * ggml's to_float output (SHA-256 of the f32 bytes, made by
 * tools/llamacpp_fixtures/iq_fixtures.c), and so do one tensor's blocks
 * ggml quantized to iq3_xxs and iq3_s (iq_blocks.c); the iq2 and iq1 grids
 * expand to the bytes of ggml's tables (SHA-256 recorded here);
 * hand-packed blocks decode to the values the format's definition gives
 * (exact small-integer products; the implied eighth sign); the dtype traits
 * match ggml's ids and sizes; bad lengths and encoding are refused. */
#include "testutil.h"
#include "tu_sha256.h"

#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *tag;
    rb_dtype dtype;
} k_iq[] = {{"iq4_nl", RB_IQ4_NL}, {"iq4_xs", RB_IQ4_XS}, {"iq2_xxs", RB_IQ2_XXS}, {"iq2_xs", RB_IQ2_XS},
             {"iq2_s", RB_IQ2_S},   {"iq1_s", RB_IQ1_S},   {"iq1_m", RB_IQ1_M}};

static void check_file(const char *tag, rb_dtype dtype) {
    char rel[128], path[1024];
    snprintf(rel, sizeof rel, "llamacpp/tiny-%s.gguf", tag);
    rb_gguf *g = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_gguf_open(tu_data(path, sizeof path, rel), &g, &err) != RB_OK) fail_msg("open %s: %s", path, err.msg);
    snprintf(rel, sizeof rel, "llamacpp/tiny-%s.dequant.sha256", tag);
    size_t len = 0;
    char *list = tu_read_file(tu_data(path, sizeof path, rel), &len);
    assert_non_null(list);
    int checked = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char want[65], name[200];
        if (sscanf(line, "%64s %199s", want, name) != 2) fail_msg("bad line in %s: %s", rel, line);
        const rb_gguf_tensor_info *ti = rb_gguf_find_tensor(g, name);
        assert_non_null(ti);
        assert_int_equal(ti->dtype, dtype);
        int64_t n = 1;
        for (int d = 0; d < RB_MAX_DIMS; d++) n *= ti->ne[d];
        assert_int_equal(ti->nbytes, rb_dtype_row_size(dtype, n));
        float *out = malloc((size_t)n * sizeof(float));
        assert_non_null(out);
        TU_OK(rb_dequantize_row(dtype, ti->data, out, n));
        char got[65];
        tu_sha256_floats_le(out, (size_t)n, got);
        if (strcmp(got, want) != 0) fail_msg("%s %s: decoding differs from ggml's (sha256 %s, want %s)", tag, name, got, want);
        free(out);
        checked++;
    }
    assert_int_equal(checked, 16); /* token_embd, output and 2 x 7 layer matrices */
    free(list);
    rb_gguf_close(g);
}

static void test_decode_matches_ggml(void **state) {
    (void)state;
    for (size_t t = 0; t < sizeof k_iq / sizeof k_iq[0]; t++) check_file(k_iq[t].tag, k_iq[t].dtype);
}

/* blk.1.attn_k.weight of tiny-f32.gguf (256 x 128) as ggml's iq3 blocks. */
static void test_iq3_blocks_match_ggml(void **state) {
    (void)state;
    char path[1024];
    size_t len = 0;
    char *list = tu_read_file(tu_data(path, sizeof path, "llamacpp/blk1-attn_k.dequant.sha256"), &len);
    assert_non_null(list);
    int checked = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char want[65], tag[32], rel[128];
        if (sscanf(line, "%64s %31s", want, tag) != 2) fail_msg("bad line: %s", line);
        rb_dtype t;
        assert_true(rb_dtype_from_name(tag, &t));
        snprintf(rel, sizeof rel, "llamacpp/blk1-attn_k.%s.blocks", tag);
        size_t nbytes = 0;
        void *blocks = tu_read_file(tu_data(path, sizeof path, rel), &nbytes);
        const int64_t n = 256 * 128;
        assert_int_equal(nbytes, rb_dtype_row_size(t, n));
        float *out = malloc((size_t)n * sizeof(float));
        assert_non_null(out);
        TU_OK(rb_dequantize_row(t, blocks, out, n));
        char got[65];
        tu_sha256_floats_le(out, (size_t)n, got);
        if (strcmp(got, want) != 0) fail_msg("%s: decoding differs from ggml's (sha256 %s, want %s)", tag, got, want);
        free(out);
        free(blocks);
        checked++;
    }
    assert_int_equal(checked, 2);
    free(list);
}

/* iq3_xxs: group 0's word holds 7-bit sign fields and the scale in bits
 * 28-31; the eighth sign of each 8 values makes the minus count even. Grid
 * point 0 is (4, 4, 4, 4) (the format's first lattice point). */
static void test_iq3_xxs_definition(void **state) {
    (void)state;
    rb_block_iq3_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00;                                               /* 1 */
    const uint32_t w = (3u << 28) | (1u << 0) | (3u << 7) | (0x7Fu << 21); /* fields 1, 3, 0, 127 */
    memcpy(b.qs + 64, &w, 4);
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ3_XXS, &b, out, 256));
    const float sc = 1.0f * (0.5f + 3.0f) * 0.5f; /* 1.75 */
    const int minus[4][8] = {{1, 0, 0, 0, 0, 0, 0, 1}, {1, 1, 0, 0, 0, 0, 0, 0}, {0}, {1, 1, 1, 1, 1, 1, 1, 1}};
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 8; j++) assert_true(out[8 * l + j] == (minus[l][j] ? -4.0f : 4.0f) * sc);
    for (int i = 32; i < 256; i++) assert_true(out[i] == 4.0f * 0.25f); /* scale (0 + 1/2) / 2 */
}

/* Each iq2 grid point expanded to its 8 level bytes, in ggml's table order
 * and layout (a little-endian uint64 per point), hashes to the SHA-256 of
 * ggml's iq2xxs_grid / iq2xs_grid / iq2s_grid arrays (computed from
 * ggml-common.h). */
static void test_iq2_grids_match_ggml(void **state) {
    (void)state;
    const struct {
        const uint16_t *grid;
        int n;
        const char *want;
    } g[] = {{rb_iq2xxs_grid, 256, "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54"},
             {rb_iq2xs_grid, 512, "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de"},
             {rb_iq2s_grid, 1024, "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88"}};
    for (int t = 0; t < 3; t++) {
        tu_sha256 h;
        tu_sha256_init(&h);
        for (int i = 0; i < g[t].n; i++) {
            uint8_t v[8];
            for (int j = 0; j < 8; j++) v[j] = (uint8_t)(((g[t].grid[i] >> (2 * j)) & 3) == 0   ? 8
                                                         : ((g[t].grid[i] >> (2 * j)) & 3) == 1 ? 25
                                                                                                 : 43);
            for (int j = 0; j < 8; j++) assert_true(((g[t].grid[i] >> (2 * j)) & 3) != 3);
            tu_sha256_update(&h, v, 8);
        }
        char got[65];
        tu_sha256_hex(&h, got);
        assert_string_equal(got, g[t].want);
    }
}

/* The iq1_s / iq1_m grid: each point's 8 values (-1, 0, +1) as int8 bytes
 * hash to the SHA-256 of ggml's iq1s_grid array (8 bytes per point). */
static void test_iq1_grid_matches_ggml(void **state) {
    (void)state;
    tu_sha256 h;
    tu_sha256_init(&h);
    for (int i = 0; i < 2048; i++) {
        uint8_t v[8];
        for (int j = 0; j < 8; j++) {
            const int k = (rb_iq1s_grid[i] >> (2 * j)) & 3;
            assert_true(k != 3);
            v[j] = (uint8_t)(int8_t)(k - 1);
        }
        tu_sha256_update(&h, v, 8);
    }
    char got[65];
    tu_sha256_hex(&h, got);
    assert_string_equal(got, "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a");
}

/* Eighth sign of a 7-bit field: set when the field has an odd number of ones. */
static unsigned signs_by_count(unsigned s7) {
    int ones = 0;
    for (int j = 0; j < 7; j++) ones += (s7 >> j) & 1;
    return s7 | (ones % 2 ? 128u : 0u);
}

/* iq2_xxs: group g's 8 bytes are 4 grid indices and a word with four 7-bit
 * sign fields and the scale s in bits 28-31, the group's scale d (s + 1/2) / 4.
 * Grid points 0, 1 and 255 are (8 x 8), (43, 8 x 7) and (8, 25, 8, 8, 25,
 * 43, 43, 43). Group 1
 * takes random indices and fields: its values follow the grid table and
 * the sign rule. */
static void test_iq2_xxs_definition(void **state) {
    (void)state;
    rb_block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0xC000; /* -2 */
    b.qs[0] = 1;
    b.qs[2] = 255;
    const uint32_t w = (3u << 28) | (1u << 0) | (3u << 7) | (0x7Fu << 21); /* fields 1, 3, 0, 127 */
    memcpy(b.qs + 4, &w, 4);
    uint32_t st = 12345;
    for (int k = 8; k < 16; k++) {
        st = st * 1103515245u + 12345u;
        b.qs[k] = (uint8_t)(st >> 16);
    }
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ2_XXS, &b, out, 256));
    const float sc = -2.0f * (0.5f + 3.0f) * 0.25f; /* -1.75 */
    const int minus[4][8] = {{1, 0, 0, 0, 0, 0, 0, 1}, {1, 1, 0, 0, 0, 0, 0, 0}, {0}, {1, 1, 1, 1, 1, 1, 1, 1}};
    const int mag[4][8] = {{43, 8, 8, 8, 8, 8, 8, 8}, {8, 8, 8, 8, 8, 8, 8, 8}, {8, 25, 8, 8, 25, 43, 43, 43},
                           {8, 8, 8, 8, 8, 8, 8, 8}};
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 8; j++) assert_true(out[8 * l + j] == (minus[l][j] ? -1.0f : 1.0f) * (float)mag[l][j] * sc);
    uint32_t w1;
    memcpy(&w1, b.qs + 12, 4);
    const float sc1 = -2.0f * (0.5f + (float)(w1 >> 28)) * 0.25f;
    for (int l = 0; l < 4; l++) {
        const unsigned sg = signs_by_count((w1 >> (7 * l)) & 127);
        for (int j = 0; j < 8; j++) {
            const int lv = (rb_iq2xxs_grid[b.qs[8 + l]] >> (2 * j)) & 3;
            const float v = sc1 * (float)(lv == 0 ? 8 : lv == 1 ? 25 : 43);
            assert_true(out[32 + 8 * l + j] == ((sg >> j) & 1 ? -v : v));
        }
    }
    for (int i = 64; i < 256; i++) assert_true(out[i] == -2.0f * 0.5f * 0.25f * 8.0f); /* s = 0, point 0 */
}

/* iq2_xs: word 4g + r holds run r's 9-bit index and 7-bit sign field; the
 * low nibble of scales[g] scales runs 0-1, the high nibble runs 2-3. Grid
 * point 511 is (43 x 8), point 0 (8 x 8). */
static void test_iq2_xs_definition(void **state) {
    (void)state;
    rb_block_iq2_xs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    b.qs[0] = (uint16_t)(511 | 1u << 9);   /* point 511, field 1: minus at 0 and 7 */
    b.qs[1] = (uint16_t)(0 | 0x7Fu << 9);  /* point 0, field 127: all minus */
    b.qs[2] = (uint16_t)(511 | 3u << 9);   /* field 3: minus at 0, 1 */
    b.qs[3] = 0;
    b.scales[0] = (uint8_t)(15 | 2 << 4);
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ2_XS, &b, out, 256));
    const float lo = 0.5f * (0.5f + 15.0f) * 0.25f, hi = 0.5f * (0.5f + 2.0f) * 0.25f;
    for (int j = 0; j < 8; j++) {
        assert_true(out[j] == (j == 0 || j == 7 ? -43.0f : 43.0f) * lo);
        assert_true(out[8 + j] == -8.0f * lo);
        assert_true(out[16 + j] == (j < 2 ? -43.0f : 43.0f) * hi);
        assert_true(out[24 + j] == 8.0f * hi);
    }
    for (int i = 32; i < 256; i++) assert_true(out[i] == 0.5f * 0.5f * 0.25f * 8.0f);
}

/* iq2_s: run r of group g takes grid index qs[4g + r] | (bits 2r..2r+1 of
 * qh[g]) << 8 and its 8 signs from byte qs[32 + 4g + r]; scales as iq2_xs.
 * Grid point 1023 is (43 x 8), point 0 (8 x 8), point 256 (25, 25, 25, 25,
 * 25, 8, 25, 8) (ggml's table). */
static void test_iq2_s_definition(void **state) {
    (void)state;
    rb_block_iq2_s b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    b.qs[0] = 255;
    b.qh[0] = 3;     /* run 0: index 1023 */
    b.qs[32] = 0x81; /* minus at 0 and 7 */
    b.qs[33] = 0xFF; /* run 1: point 0, all minus */
    b.qh[0] |= 1u << 4; /* run 2: index 256 */
    b.qs[34] = 0x20;    /* minus at 5 */
    b.scales[0] = (uint8_t)(15 | 2 << 4);
    b.qs[4 + 1] = 255; /* group 1 run 1: index 1023 through qh[1] */
    b.qh[1] = 3u << 2;
    b.qs[32 + 4 + 1] = 0x0F;
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ2_S, &b, out, 256));
    const float lo = 0.5f * (0.5f + 15.0f) * 0.25f, hi = 0.5f * (0.5f + 2.0f) * 0.25f, s0 = 0.5f * 0.5f * 0.25f;
    const float p256[8] = {25, 25, 25, 25, 25, 8, 25, 8};
    for (int j = 0; j < 8; j++) {
        assert_true(out[j] == (j == 0 || j == 7 ? -43.0f : 43.0f) * lo);
        assert_true(out[8 + j] == -8.0f * lo);
        assert_true(out[16 + j] == (j == 5 ? -p256[j] : p256[j]) * hi);
        assert_true(out[24 + j] == 8.0f * hi);
        assert_true(out[32 + j] == 8.0f * s0);
        assert_true(out[40 + j] == (j < 4 ? -43.0f : 43.0f) * s0);
    }
    for (int i = 48; i < 256; i++) assert_true(out[i] == 8.0f * s0);
}

/* iq1_s: group g's word qh[g] holds run r's high index bits at 3r..3r+2,
 * the scale s at 12-14 (d (2s + 1)) and the shift's sign at 15. Grid point 0
 * is (-1 x 8), point 1 (+1, -1 x 7), point 2047 (+1 x 8) (ggml's table). */
static void test_iq1_s_definition(void **state) {
    (void)state;
    rb_block_iq1_s b;
    memset(&b, 0, sizeof b);
    b.d = 0xC000; /* -2 */
    b.qs[0] = 1;
    b.qs[2] = 255;
    b.qh[0] = (uint16_t)(7u << 6 | 5u << 12 | 0x8000u); /* run 2: index 2047; s = 5; shift -1/8 */
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ1_S, &b, out, 256));
    const float sc = -2.0f * 11.0f;
    for (int j = 0; j < 8; j++) {
        assert_true(out[j] == sc * ((j == 0 ? 1.0f : -1.0f) - 0.125f));
        assert_true(out[8 + j] == sc * (-1.0f - 0.125f));
        assert_true(out[16 + j] == sc * (1.0f - 0.125f));
        assert_true(out[24 + j] == sc * (-1.0f - 0.125f));
    }
    for (int i = 32; i < 256; i++) assert_true(out[i] == -2.0f * (-1.0f + 0.125f)); /* s = 0, shift +1/8 */
}

/* iq1_m: byte qh[2g + h] holds runs 2h and 2h + 1 (high index bits 0-2 and
 * 4-6, shift signs at bits 3 and 7); scale word k holds groups 2k and 2k + 1
 * (6 bits each: 3 for runs 0-1, 3 for runs 2-3); the top nibbles of the four
 * words are the f16 d, least significant first. */
static void test_iq1_m_definition(void **state) {
    (void)state;
    rb_block_iq1_m b;
    memset(&b, 0, sizeof b);
    /* d = -0.25, f16 0xB400: nibbles 0, 0, 4, 0xB */
    b.scales[5] = 0x40;
    b.scales[7] = 0xB0;
    /* group 0: runs 0-1 scale 3 (7), runs 2-3 scale 6 (13); group 1: runs 0-1 scale 1 (3) */
    const unsigned w0 = 3u | 6u << 3 | 1u << 6;
    b.scales[0] = (uint8_t)(w0 & 255);
    b.scales[1] = (uint8_t)(w0 >> 8);
    b.qs[0] = 1;              /* run 0: point 1 */
    b.qs[1] = 255;
    b.qh[0] = (uint8_t)(7u << 4 | 0x80u); /* run 1: index 2047, shift -1/8 */
    b.qh[1] = 0x08;                     /* run 2: point 0, shift -1/8; run 3: point 0, +1/8 */
    b.qs[4] = 255;
    b.qh[2] = 7; /* group 1 run 0: index 2047 */
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ1_M, &b, out, 256));
    const float d = -0.25f;
    for (int j = 0; j < 8; j++) {
        assert_true(out[j] == d * 7.0f * ((j == 0 ? 1.0f : -1.0f) + 0.125f));
        assert_true(out[8 + j] == d * 7.0f * (1.0f - 0.125f));
        assert_true(out[16 + j] == d * 13.0f * (-1.0f - 0.125f));
        assert_true(out[24 + j] == d * 13.0f * (-1.0f + 0.125f));
        assert_true(out[32 + j] == d * 3.0f * (1.0f + 0.125f));
        assert_true(out[40 + j] == d * 3.0f * (-1.0f + 0.125f));
        assert_true(out[48 + j] == d * (-1.0f + 0.125f)); /* runs 2-3 of group 1: scale 0 */
    }
    for (int i = 64; i < 256; i++) assert_true(out[i] == d * (-1.0f + 0.125f));
}

static const int k_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* iq4_nl: value j < 16 is the low nibble of byte j, j >= 16 the high nibble of byte j - 16. */
static void test_iq4_nl_definition(void **state) {
    (void)state;
    rb_block_iq4_nl b[2];
    b[0].d = 0x3800; /* 0.5 */
    b[1].d = 0xC400; /* -4 */
    for (int j = 0; j < 16; j++) {
        b[0].qs[j] = (uint8_t)(j | (15 - j) << 4);
        b[1].qs[j] = (uint8_t)((j * 7) % 16 | ((j * 3 + 1) % 16) << 4);
    }
    float out[64];
    TU_OK(rb_dequantize_row(RB_IQ4_NL, b, out, 64));
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == 0.5f * (float)k_levels[j]);
        assert_true(out[16 + j] == 0.5f * (float)k_levels[15 - j]);
        assert_true(out[32 + j] == -4.0f * (float)k_levels[(j * 7) % 16]);
        assert_true(out[48 + j] == -4.0f * (float)k_levels[(j * 3 + 1) % 16]);
    }
}

/* iq4_xs: sub-block i's 6-bit scale has its low 4 bits in nibble i % 2 of
 * scales_l[i / 2] and its high 2 bits at bits 2i..2i+1 of scales_h. */
static void test_iq4_xs_definition(void **state) {
    (void)state;
    const int ls[8] = {0, 63, 32, 33, 17, 48, 5, 40};
    rb_block_iq4_xs b;
    memset(&b, 0, sizeof b);
    b.d = 0x3400; /* 0.25 */
    for (int i = 0; i < 8; i++) {
        b.scales_l[i / 2] |= (uint8_t)((ls[i] & 15) << (4 * (i % 2)));
        b.scales_h |= (uint16_t)((ls[i] >> 4) << (2 * i));
    }
    for (int k = 0; k < 128; k++) b.qs[k] = (uint8_t)((k * 37 + 11) & 0xFF);
    float out[256];
    TU_OK(rb_dequantize_row(RB_IQ4_XS, &b, out, 256));
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 16; j++) {
            const uint8_t q = b.qs[16 * i + j];
            assert_true(out[32 * i + j] == 0.25f * (float)(ls[i] - 32) * (float)k_levels[q & 15]);
            assert_true(out[32 * i + 16 + j] == 0.25f * (float)(ls[i] - 32) * (float)k_levels[q >> 4]);
        }
}

static void test_traits_and_refusals(void **state) {
    (void)state;
    rb_dtype t;
    assert_true(rb_dtype_from_name("IQ4_NL", &t));
    assert_int_equal(t, 20);
    assert_true(rb_dtype_from_name("iq4_xs", &t));
    assert_int_equal(t, 23);
    assert_int_equal(rb_dtype_info(RB_IQ4_NL)->block_size, 32);
    assert_int_equal(rb_dtype_info(RB_IQ4_NL)->type_size, 18);
    assert_int_equal(rb_dtype_info(RB_IQ4_XS)->block_size, 256);
    assert_int_equal(rb_dtype_info(RB_IQ4_XS)->type_size, 136);
    assert_int_equal(rb_dtype_row_size(RB_IQ4_XS, 512), 272);
    assert_int_equal(rb_dtype_row_size(RB_IQ4_XS, 200), 0);
    unsigned char blocks[272] = {0};
    float out[512];
    assert_int_equal(rb_dequantize_row(RB_IQ4_XS, blocks, out, 200), RB_E_INVALID);
    assert_int_equal(rb_dequantize_row(RB_IQ4_NL, blocks, out, 33), RB_E_INVALID);
    assert_int_equal(rb_dequantize_row(RB_IQ4_NL, NULL, out, 32), RB_E_INVALID);
    assert_true(rb_dtype_from_name("iq3_xxs", &t));
    assert_int_equal(t, 18);
    assert_true(rb_dtype_from_name("IQ3_S", &t));
    assert_int_equal(t, 21);
    assert_int_equal(rb_dtype_info(RB_IQ3_XXS)->type_size, 98);
    assert_int_equal(rb_dtype_info(RB_IQ3_S)->type_size, 110);
    assert_int_equal(rb_dequantize_row(RB_IQ3_S, blocks, out, 128), RB_E_INVALID);
    assert_int_equal(rb_quantize_row(RB_IQ3_XXS, out, blocks, 256), RB_E_UNSUPPORTED);
    assert_true(rb_dtype_from_name("IQ2_XXS", &t));
    assert_int_equal(t, 16);
    assert_true(rb_dtype_from_name("iq2_xs", &t));
    assert_int_equal(t, 17);
    assert_int_equal(rb_dtype_info(RB_IQ2_XXS)->block_size, 256);
    assert_int_equal(rb_dtype_info(RB_IQ2_XXS)->type_size, 66);
    assert_int_equal(rb_dtype_info(RB_IQ2_XS)->block_size, 256);
    assert_int_equal(rb_dtype_info(RB_IQ2_XS)->type_size, 74);
    assert_int_equal(rb_dtype_row_size(RB_IQ2_XS, 512), 148);
    assert_int_equal(rb_dequantize_row(RB_IQ2_XXS, blocks, out, 255), RB_E_INVALID);
    assert_int_equal(rb_dequantize_row(RB_IQ2_XS, blocks, out, 32), RB_E_INVALID);
    assert_int_equal(rb_quantize_row(RB_IQ2_XXS, out, blocks, 256), RB_E_UNSUPPORTED);
    assert_int_equal(rb_quantize_row(RB_IQ2_XS, out, blocks, 256), RB_E_UNSUPPORTED);
    const struct {
        const char *name;
        rb_dtype t;
        int id;
        size_t size;
    } low[] = {{"IQ2_S", RB_IQ2_S, 22, 82}, {"iq1_s", RB_IQ1_S, 19, 50}, {"iq1_M", RB_IQ1_M, 29, 56}};
    for (int i = 0; i < 3; i++) {
        assert_true(rb_dtype_from_name(low[i].name, &t));
        assert_int_equal(t, low[i].id);
        assert_true(rb_dtype_valid(low[i].id));
        assert_int_equal(rb_dtype_info(low[i].id)->block_size, 256);
        assert_int_equal(rb_dtype_info(low[i].id)->type_size, low[i].size);
        assert_int_equal(rb_dtype_row_size(low[i].t, 512), 2 * low[i].size);
        assert_int_equal(rb_dtype_row_size(low[i].t, 128), 0);
        assert_int_equal(rb_dequantize_row(low[i].t, blocks, out, 255), RB_E_INVALID);
        assert_int_equal(rb_dequantize_row(low[i].t, NULL, out, 256), RB_E_INVALID);
        assert_int_equal(rb_quantize_row(low[i].t, out, blocks, 256), RB_E_UNSUPPORTED);
        assert_false(rb_quant_can_quantize(low[i].t));
    }
    assert_false(rb_quant_can_quantize(RB_IQ4_NL));
    assert_false(rb_quant_can_quantize(RB_IQ4_XS));
    assert_int_equal(rb_quantize_row(RB_IQ4_NL, out, blocks, 32), RB_E_UNSUPPORTED);
    assert_int_equal(rb_quantize_row(RB_IQ4_XS, out, blocks, 256), RB_E_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_matches_ggml),
        cmocka_unit_test(test_iq3_blocks_match_ggml),
        cmocka_unit_test(test_iq2_grids_match_ggml),
        cmocka_unit_test(test_iq2_xxs_definition),
        cmocka_unit_test(test_iq2_xs_definition),
        cmocka_unit_test(test_iq1_grid_matches_ggml),
        cmocka_unit_test(test_iq2_s_definition),
        cmocka_unit_test(test_iq1_s_definition),
        cmocka_unit_test(test_iq1_m_definition),
        cmocka_unit_test(test_iq3_xxs_definition),
        cmocka_unit_test(test_iq4_nl_definition),
        cmocka_unit_test(test_iq4_xs_definition),
        cmocka_unit_test(test_traits_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
