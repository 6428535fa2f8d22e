/* Tokenizer unit tests on synthetic vocabularies built in the test: BPE
 * against a naive O(n^2) merge loop (merge ranks and SentencePiece scores),
 * byte-level identity and lossy decoding, byte-fallback streaming, added-token
 * flags, NFC, and every bad-input path (garbage JSON, unknown types,
 * invalid UTF-8, ids out of range). */
#include "tokref.h"

#include "rbee/gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---- */

/* Strict UTF-8 check, written independently of the library. */
static bool tok_valid_utf8_for_test(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1F) : k == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (u[i + j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

static rb_tokenizer *load_json(json_t *root, rb_status want, rb_error *e) {
    char *s = json_dumps(root, JSON_COMPACT);
    assert_non_null(s);
    rb_tokenizer *t = NULL;
    rb_status st = rb_tokenizer_load_hf_memory(s, strlen(s), NULL, 0, &t, e);
    free(s);
    if (st != want) fail_msg("load status %s (%s), want %s", rb_status_str(st), e->msg, rb_status_str(want));
    return t;
}

static json_t *bpe_json(json_t *vocab, json_t *merges) {
    return json_pack("{s:{s:s, s:o, s:o, s:b, s:b}, s:[]}", "model", "type", "BPE", "vocab", vocab, "merges", merges,
                     "byte_fallback", 0, "fuse_unk", 0, "added_tokens");
}

static int32_t *encode(const rb_tokenizer *t, const char *s, size_t len, unsigned flags, size_t *n) {
    int32_t *ids;
    rb_error e;
    rb_status st = rb_tokenizer_encode(t, s, len, flags, &ids, n, &e);
    if (st) fail_msg("encode: %s", e.msg);
    return ids;
}

static char *decode(const rb_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    char *s;
    rb_error e;
    rb_status st = rb_tokenizer_decode(t, ids, n, 0, &s, len, &e);
    if (st) fail_msg("decode: %s", e.msg);
    return s;
}

/* ---- BPE against a naive reference ---- */

typedef struct naive_vocab {
    char tok[400][16];
    int n;
    int ml[400], mr[400], mres[400]; /* merges by rank */
    int nm;
    float score[400];
} naive_vocab;

static int nv_find(const naive_vocab *v, const char *s, size_t len) {
    for (int i = 0; i < v->n; i++)
        if (strlen(v->tok[i]) == len && !memcmp(v->tok[i], s, len)) return i;
    return -1;
}

/* Naive BPE: every step scans all adjacent pairs for the best merge. */
static size_t naive_bpe(const naive_vocab *v, const char *s, size_t len, bool scores, int32_t *out) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) out[n++] = nv_find(v, s + i, 1);
    for (;;) {
        double best = 1e300;
        size_t bi = 0;
        int bres = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            double key = 1e300;
            int res = -1;
            if (scores) {
                char cat[40];
                size_t la = strlen(v->tok[out[i]]), lb = strlen(v->tok[out[i + 1]]);
                memcpy(cat, v->tok[out[i]], la);
                memcpy(cat + la, v->tok[out[i + 1]], lb);
                res = nv_find(v, cat, la + lb);
                if (res >= 0) key = -(double)v->score[res];
            } else {
                for (int r = 0; r < v->nm; r++)
                    if (v->ml[r] == out[i] && v->mr[r] == out[i + 1]) { key = r; res = v->mres[r]; break; }
            }
            if (res >= 0 && key < best) { best = key; bi = i; bres = res; }
        }
        if (bres < 0) return n;
        out[bi] = bres;
        memmove(out + bi + 1, out + bi + 2, (n - bi - 2) * sizeof *out);
        n--;
    }
}

static void make_vocab(naive_vocab *v, tu_rng *r) {
    memset(v, 0, sizeof *v);
    for (int c = 0; c < 4; c++) { v->tok[c][0] = (char)('a' + c); v->n++; }
    while (v->nm < 120) {
        int a = (int)(tu_rng_u64(r) % (uint64_t)v->n), b = (int)(tu_rng_u64(r) % (uint64_t)v->n);
        size_t la = strlen(v->tok[a]), lb = strlen(v->tok[b]);
        if (la + lb > 12) continue;
        char cat[16] = {0};
        memcpy(cat, v->tok[a], la);
        memcpy(cat + la, v->tok[b], lb);
        bool dup = false;
        for (int k = 0; k < v->nm; k++) dup |= v->ml[k] == a && v->mr[k] == b;
        if (dup) continue;
        int res = nv_find(v, cat, la + lb);
        if (res < 0) { res = v->n++; memcpy(v->tok[res], cat, la + lb + 1); }
        v->ml[v->nm] = a; v->mr[v->nm] = b; v->mres[v->nm] = res; v->nm++;
    }
    for (int i = 0; i < v->n; i++) v->score[i] = -(float)(tu_rng_u64(r) % 1000);
}

static void test_bpe_vs_naive(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 1234);
    for (int round = 0; round < 5; round++) {
        naive_vocab v;
        make_vocab(&v, &r);
        json_t *vocab = json_object(), *merges = json_array();
        for (int i = 0; i < v.n; i++) json_object_set_new(vocab, v.tok[i], json_integer(i));
        for (int k = 0; k < v.nm; k++) {
            if (k % 2) json_array_append_new(merges, json_pack("[s,s]", v.tok[v.ml[k]], v.tok[v.mr[k]]));
            else {
                char m[40];
                snprintf(m, sizeof m, "%s %s", v.tok[v.ml[k]], v.tok[v.mr[k]]);
                json_array_append_new(merges, json_string(m));
            }
        }
        json_t *root = bpe_json(vocab, merges);
        rb_error e;
        rb_tokenizer *t = load_json(root, RB_OK, &e);
        json_decref(root);
        for (int it = 0; it < 200; it++) {
            char s[300];
            size_t len = 1 + tu_rng_u64(&r) % 120;
            for (size_t i = 0; i < len; i++) s[i] = (char)('a' + tu_rng_u64(&r) % 4);
            int32_t want[300];
            size_t nw = naive_bpe(&v, s, len, false, want), n;
            int32_t *got = encode(t, s, len, 0, &n);
            assert_true(tokref_ids_equal("bpe", "", got, n, want, nw));
            size_t dl;
            char *d = decode(t, got, n, &dl); /* no decoder: HF joins with spaces */
            size_t k = 0;
            for (size_t i = 0; i < dl; i++)
                if (d[i] != ' ') assert_int_equal(d[i], s[k++]);
            assert_int_equal(k, len);
            free(d);
            free(got);
        }
        rb_tokenizer_free(t);

        /* the same vocabulary as a SentencePiece GGUF without merges: score-ranked merging */
        rb_gguf_writer *w;
        TU_OK(rb_gguf_writer_create(&w, &e));
        const char *toks[400];
        int32_t types[400];
        for (int i = 0; i < v.n; i++) { toks[i] = v.tok[i]; types[i] = 1; }
        TU_OK(rb_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
        TU_OK(rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)v.n));
        TU_OK(rb_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RB_GGUF_FLOAT32, v.score, (uint64_t)v.n));
        TU_OK(rb_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RB_GGUF_INT32, types, (uint64_t)v.n));
        TU_OK(rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false));
        TU_OK(rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false));
        char path[256];
        snprintf(path, sizeof path, "tok_unit_%d.gguf", (int)getpid());
        TU_OK(rb_gguf_writer_write(w, path, 0, &e));
        rb_gguf_writer_free(w);
        rb_gguf *g;
        TU_OK(rb_gguf_open(path, &g, &e));
        TU_OK(rb_tokenizer_load_gguf(g, &t, &e));
        for (int it = 0; it < 200; it++) {
            char s[300];
            size_t len = 1 + tu_rng_u64(&r) % 120;
            for (size_t i = 0; i < len; i++) s[i] = (char)('a' + tu_rng_u64(&r) % 4);
            int32_t want[300];
            size_t nw = naive_bpe(&v, s, len, true, want), n;
            int32_t *got = encode(t, s, len, RB_TOK_ADD_SPECIAL, &n);
            assert_true(tokref_ids_equal("spm", "", got, n, want, nw));
            free(got);
        }
        rb_tokenizer_free(t);
        rb_gguf_close(g);
        unlink(path);
    }
}

/* ---- byte-level: identity vocabulary of the 256 byte characters ---- */

/* GPT-2's bytes_to_unicode, written independently of the library */
static void byte_char(int b, char out[3]) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int cp = b;
    if (!printable) {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

static rb_tokenizer *byte_level_tokenizer(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    json_t *root = bpe_json(vocab, json_array());
    json_object_set_new(root, "pre_tokenizer", json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1));
    json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    rb_error e;
    rb_tokenizer *t = load_json(root, RB_OK, &e);
    json_decref(root);
    return t;
}

static size_t random_utf8(tu_rng *r, char *s, size_t max) {
    static const char *const pieces[] = {"a", "Z", " ", "  ", "\n", "\t", "7", "é", "ß", "中", "文", "😀", "🦙", "'s", "!", "ü", "\xC2\xA0"};
    size_t n = 0;
    for (;;) {
        const char *p = pieces[tu_rng_u64(r) % (sizeof pieces / sizeof *pieces)];
        size_t l = strlen(p);
        if (n + l > max) return n;
        memcpy(s + n, p, l);
        n += l;
    }
}

static char *stream_all(const rb_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    rb_tokenizer_stream *s;
    rb_error e;
    TU_OK(rb_tokenizer_stream_create(t, 0, &s, &e));
    char *acc = malloc(4 * n + 64);
    assert_non_null(acc);
    size_t al = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t pl;
        if (i < n) {
            TU_OK(rb_tokenizer_stream_push(s, ids[i], &p, &pl, &e));
            assert_true(pl == 0 || tok_valid_utf8_for_test(p, pl));
        } else {
            TU_OK(rb_tokenizer_stream_flush(s, &p, &pl, &e));
        }
        memcpy(acc + al, p, pl);
        al += pl;
    }
    rb_tokenizer_stream_free(s);
    *len = al;
    return acc;
}

static void test_byte_level(void **state) {
    (void)state;
    rb_tokenizer *t = byte_level_tokenizer();
    assert_int_equal(rb_tokenizer_get_kind(t), RB_TOKENIZER_BYTE_LEVEL);
    tu_rng r;
    tu_rng_seed(&r, 99);
    for (int it = 0; it < 200; it++) {
        char s[200];
        size_t len = random_utf8(&r, s, 1 + tu_rng_u64(&r) % 199), n;
        int32_t *ids = encode(t, s, len, RB_TOK_ADD_SPECIAL, &n);
        assert_int_equal(n, len); /* one id per byte, id = byte */
        for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], (unsigned char)s[i]);
        size_t dl, sl;
        char *d = decode(t, ids, n, &dl);
        assert_int_equal(dl, len);
        assert_memory_equal(d, s, len);
        char *st = stream_all(t, ids, n, &sl);
        assert_int_equal(sl, len);
        assert_memory_equal(st, s, len);
        free(st);
        free(d);
        free(ids);
    }
    /* lossy decoding follows Rust's from_utf8_lossy (one U+FFFD per maximal invalid subpart) */
    static const struct { int32_t ids[6]; size_t n; const char *want; } cases[] = {
        {{0xE4, 0xB8, 'A'}, 3, "\xEF\xBF\xBD" "A"},
        {{0xFF, 0xFE}, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {{0xED, 0xA0, 0x80}, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {{0xF0, 0x9F, 0x98}, 3, "\xEF\xBF\xBD"},
        {{0xC3, 0xA9, 0x80, 'x'}, 4, "\xC3\xA9\xEF\xBF\xBDx"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t dl, sl;
        char *d = decode(t, cases[c].ids, cases[c].n, &dl);
        assert_string_equal(d, cases[c].want);
        char *st = stream_all(t, cases[c].ids, cases[c].n, &sl);
        assert_int_equal(sl, dl);
        assert_memory_equal(st, d, dl);
        free(st);
        free(d);
    }
    rb_tokenizer_free(t);
}

/* ---- SentencePiece-style with byte fallback ---- */

static const char META[] = "\xE2\x96\x81";

static rb_tokenizer *spm_tokenizer(void) {
    json_t *vocab = json_object();
    json_object_set_new(vocab, "<unk>", json_integer(0));
    json_object_set_new(vocab, "<s>", json_integer(1));
    json_object_set_new(vocab, "</s>", json_integer(2));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        json_object_set_new(vocab, name, json_integer(3 + b));
    }
    json_object_set_new(vocab, META, json_integer(259));
    json_object_set_new(vocab, "a", json_integer(260));
    json_object_set_new(vocab, "b", json_integer(261));
    json_object_set_new(vocab, "\xE2\x96\x81" "a", json_integer(262));
    json_object_set_new(vocab, "ab", json_integer(263));
    json_t *merges = json_pack("[s,s]", "\xE2\x96\x81 a", "a b");
    json_t *root = bpe_json(vocab, merges);
    json_t *model = json_object_get(root, "model");
    json_object_set_new(model, "byte_fallback", json_true());
    json_object_set_new(model, "unk_token", json_string("<unk>"));
    json_t *added = json_object_get(root, "added_tokens");
    const char *sp[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", i, "content", sp[i], "special", 1,
                                               "lstrip", 0, "rstrip", 0, "single_word", 0, "normalized", 0));
    json_object_set_new(root, "normalizer",
                        json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers", "type",
                                  "Prepend", "prepend", META, "type", "Replace", "pattern", "String", " ", "content", META));
    json_object_set_new(root, "decoder",
                        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type", "Sequence",
                                  "decoders", "type", "Replace", "pattern", "String", META, "content", " ", "type",
                                  "ByteFallback", "type", "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0));
    json_object_set_new(root, "post_processor",
                        json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}", "type",
                                  "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id",
                                  "A", "type_id", 0, "special_tokens", "<s>", "id", "<s>", "ids", 1, "tokens", "<s>"));
    rb_error e;
    rb_tokenizer *t = load_json(root, RB_OK, &e);
    json_decref(root);
    return t;
}

static void test_spm_byte_fallback(void **state) {
    (void)state;
    rb_tokenizer *t = spm_tokenizer();
    assert_int_equal(rb_tokenizer_get_kind(t), RB_TOKENIZER_SPM);
    assert_int_equal(rb_tokenizer_bos(t), 1);
    size_t n, dl;
    const char *text = "ab \xE4\xB8\xAD";
    int32_t *ids = encode(t, text, strlen(text), RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL, &n);
    const int32_t want[] = {1, 262, 261, 259, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD};
    assert_true(tokref_ids_equal("spm", text, ids, n, want, 7));
    char *d = decode(t, ids, n, &dl);
    assert_string_equal(d, "<s> ab \xE4\xB8\xAD"); /* Strip only hits the fused text's first char */
    free(d);
    free(ids);
    /* special tokens in text: parsed or not */
    ids = encode(t, "a</s>b", 6, RB_TOK_PARSE_SPECIAL, &n);
    const int32_t want2[] = {262, 2, 259, 261}; /* HF legacy: each chunk gets the ▁ prefix */
    assert_true(tokref_ids_equal("spm special", "", ids, n, want2, 4));
    free(ids);
    ids = encode(t, "</s>", 4, 0, &n);
    assert_int_equal(n, 5); /* ▁ then bytes of "</s>" (no such vocabulary tokens) */
    assert_int_equal(ids[0], 259);
    assert_int_equal(ids[1], 3 + '<');
    free(ids);
    /* invalid byte runs: one U+FFFD per byte token (HF ByteFallback) */
    const int32_t bad1[] = {3 + 0xE4, 260}, bad2[] = {3 + 0xE4, 3 + 0xB8, 261};
    d = decode(t, bad1, 2, &dl);
    assert_string_equal(d, "\xEF\xBF\xBD" "a");
    free(d);
    d = decode(t, bad2, 3, &dl);
    assert_string_equal(d, "\xEF\xBF\xBD\xEF\xBF\xBD" "b");
    free(d);
    /* streaming over random text: pieces are whole characters and concatenate to the full decode */
    tu_rng r;
    tu_rng_seed(&r, 5);
    for (int it = 0; it < 300; it++) {
        char s[200];
        size_t len = random_utf8(&r, s, 1 + tu_rng_u64(&r) % 199);
        int32_t *x = encode(t, s, len, RB_TOK_ADD_SPECIAL, &n);
        if (it % 3 == 0 && n > 2) x[tu_rng_u64(&r) % n] = 3 + (int32_t)(0x80 + tu_rng_u64(&r) % 0x80); /* inject junk bytes */
        size_t sl;
        char *full = decode(t, x, n, &dl);
        char *st = stream_all(t, x, n, &sl);
        assert_int_equal(sl, dl);
        assert_memory_equal(st, full, dl);
        if (it % 3 && len == 0) { /* Prepend skips empty text */
            assert_string_equal(full, "<s>");
        } else if (it % 3) { /* untouched ids: decode(encode(s)) = "<s> " + s (HF) */
            assert_int_equal(dl, len + 4);
            assert_memory_equal(full, "<s> ", 4);
            assert_memory_equal(full + 4, s, len);
        }
        free(st);
        free(full);
        free(x);
    }
    rb_tokenizer_free(t);
}

/* ---- added tokens: lstrip / rstrip / single_word / special / normalized ---- */

static void test_added_tokens(void **state) {
    (void)state;
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    json_t *root = bpe_json(vocab, json_array());
    json_object_set_new(root, "pre_tokenizer", json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1));
    json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    json_object_set_new(root, "normalizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "Regex", "[0-9]+", "content", "#"));
    json_t *added = json_object_get(root, "added_tokens");
    struct { const char *c; int sp, ls, rs, sw, norm; } a[] = {
        {"<special>", 1, 0, 0, 0, 0}, {"[tool]", 0, 0, 0, 0, 0}, {"<ls>", 1, 1, 0, 0, 0},
        {"<rs>", 1, 0, 1, 0, 0},      {"word", 0, 0, 0, 1, 0},   {"x#", 0, 0, 0, 0, 1},
    };
    for (int i = 0; i < 6; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 256 + i, "content", a[i].c, "special",
                                               a[i].sp, "lstrip", a[i].ls, "rstrip", a[i].rs, "single_word", a[i].sw,
                                               "normalized", a[i].norm));
    rb_error e;
    rb_tokenizer *t = load_json(root, RB_OK, &e);
    json_decref(root);
    struct { const char *text; unsigned flags; int32_t want[16]; size_t n; } cases[] = {
        {"a<special>b", RB_TOK_PARSE_SPECIAL, {'a', 256, 'b'}, 3},
        {"a<special>b", 0, {'a', '<', 's', 'p', 'e', 'c', 'i', 'a', 'l', '>', 'b'}, 11},
        {"a[tool]b", 0, {'a', 257, 'b'}, 3}, /* non-special added tokens are always matched */
        {"a  <ls>b", RB_TOK_PARSE_SPECIAL, {'a', 258, 'b'}, 3},
        {"a<rs> \t b", RB_TOK_PARSE_SPECIAL, {'a', 259, 'b'}, 3},
        {"a word b", 0, {'a', ' ', 260, ' ', 'b'}, 5},
        {"swordy", 0, {'s', 'w', 'o', 'r', 'd', 'y'}, 6},
        {"ax12y", 0, {'a', 261, 'y'}, 3}, /* normalized token matched after 12 -> # */
        {"ax#y", 0, {'a', 261, 'y'}, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n;
        int32_t *ids = encode(t, cases[c].text, strlen(cases[c].text), cases[c].flags, &n);
        assert_true(tokref_ids_equal("added", cases[c].text, ids, n, cases[c].want, cases[c].n));
        free(ids);
    }
    assert_true(rb_tokenizer_is_special(t, 256));
    assert_false(rb_tokenizer_is_special(t, 257));
    const int32_t ids[] = {'a', 256, 257, 'b'};
    char *d;
    TU_OK(rb_tokenizer_decode(t, ids, 4, RB_TOK_SKIP_SPECIAL, &d, NULL, &e));
    assert_string_equal(d, "a[tool]b");
    free(d);
    rb_tokenizer_free(t);
}

/* ---- NFC normalizer (expected values from the Unicode database) ---- */

static void test_nfc(void **state) {
    (void)state;
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    json_t *root = bpe_json(vocab, json_array());
    json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC"));
    json_object_set_new(root, "pre_tokenizer", json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0));
    rb_error e;
    rb_tokenizer *t = load_json(root, RB_OK, &e);
    json_decref(root);
    static const char *const cases[][2] = {
        {"\x65\xCC\x81", "\xC3\xA9"},
        {"\xE2\x84\xAB", "\xC3\x85"},
        {"\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80"},
        {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"},
        {"\x61\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81"},
        {"\x41\xCC\x8A\xCC\x81", "\xC7\xBA"},
        {"\xCD\x84", "\xCC\x88\xCC\x81"},
        {"\x71\xCC\x87\xCC\xA3", "\x71\xCC\xA3\xCC\x87"},
        {"\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81"},
        {"\x5A\xCC\xB5\xCC\xA1\xCD\x98\x61", "\x5A\xCC\xB5\xCC\xA1\xCD\x98\x61"},
        {"plain ascii", "plain ascii"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n, wl = strlen(cases[c][1]);
        int32_t *ids = encode(t, cases[c][0], strlen(cases[c][0]), 0, &n);
        assert_int_equal(n, wl);
        for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], (unsigned char)cases[c][1][i]);
        free(ids);
    }
    rb_tokenizer_free(t);
}

/* ---- bad input ---- */

static void expect_load(const char *json, rb_status want, const char *needle) {
    rb_tokenizer *t = NULL;
    rb_error e;
    rb_status st = rb_tokenizer_load_hf_memory(json, strlen(json), NULL, 0, &t, &e);
    if (st != want) fail_msg("'%s': got %s (%s), want %s", json, rb_status_str(st), e.msg, rb_status_str(want));
    assert_null(t);
    if (needle && !strstr(e.msg, needle)) fail_msg("message '%s' lacks '%s'", e.msg, needle);
}

static void test_bad_input(void **state) {
    (void)state;
    rb_tokenizer *t = NULL;
    rb_error e;
    assert_int_equal(rb_tokenizer_load_hf("/nonexistent/tokenizer.json", NULL, &t, &e), RB_E_IO);
    assert_null(t);
    expect_load("not json {", RB_E_FORMAT, "JSON");
    expect_load("[1,2]", RB_E_FORMAT, NULL);
    expect_load("{}", RB_E_FORMAT, "model");
    expect_load("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", RB_E_UNSUPPORTED, "WordPiece");
    expect_load("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}}", RB_E_UNSUPPORTED, "Unigram");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", RB_E_FORMAT, "vocab");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3}}}", RB_E_FORMAT, NULL);
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a q\"]}}", RB_E_FORMAT, "merge");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"aa\"]}}", RB_E_FORMAT, "merge");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", RB_E_FORMAT, "merge");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"normalizer\":{\"type\":\"NFKD\"}}", RB_E_UNSUPPORTED, "NFKD");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", RB_E_UNSUPPORTED, "Whitespace");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"decoder\":{\"type\":\"WordPiece\"}}", RB_E_UNSUPPORTED, "WordPiece");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                "\"behavior\":\"Isolated\"}}", RB_E_FORMAT, "regex");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":[{\"id\":\"x\"}]}", RB_E_FORMAT, "added");
    const char *ok = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1}}}";
    assert_int_equal(rb_tokenizer_load_hf_memory(ok, strlen(ok), "{oops", 5, &t, &e), RB_E_FORMAT);
    TU_OK(rb_tokenizer_load_hf_memory(ok, strlen(ok), NULL, 0, &t, &e));
    /* invalid UTF-8 input is rejected with the offset */
    static const char *const bad[] = {"ab\xC3\x28", "\xED\xA0\x80", "x\xF4\x90\x80\x80", "a\xE4\xB8", "\xC0\xAF", "\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = NULL;
        size_t n = 7;
        assert_int_equal(rb_tokenizer_encode(t, bad[i], strlen(bad[i]), 0, &ids, &n, &e), RB_E_INVALID);
        assert_non_null(strstr(e.msg, "UTF-8"));
        assert_null(ids);
        assert_int_equal(n, 0);
    }
    int32_t *ids;
    size_t n;
    TU_OK(rb_tokenizer_encode(t, "", 0, RB_TOK_ADD_SPECIAL, &ids, &n, &e));
    assert_int_equal(n, 0);
    free(ids);
    /* ids out of range */
    char *d = NULL;
    const int32_t oor[] = {0, 2}, neg[] = {-1};
    assert_int_equal(rb_tokenizer_decode(t, oor, 2, 0, &d, NULL, &e), RB_E_RANGE);
    assert_null(d);
    assert_non_null(strstr(e.msg, "out of range"));
    assert_int_equal(rb_tokenizer_decode(t, neg, 1, 0, &d, NULL, &e), RB_E_RANGE);
    assert_null(rb_tokenizer_token_text(t, 2, NULL));
    assert_int_equal(rb_tokenizer_token_id(t, "b", 1), 1);
    assert_int_equal(rb_tokenizer_token_id(t, "c", 1), -1);
    rb_tokenizer_stream *s;
    TU_OK(rb_tokenizer_stream_create(t, 0, &s, &e));
    const char *p;
    size_t pl;
    assert_int_equal(rb_tokenizer_stream_push(s, 5, &p, &pl, &e), RB_E_RANGE);
    rb_tokenizer_stream_free(s);
    assert_int_equal(rb_tokenizer_encode(t, NULL, 3, 0, &ids, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_tokenizer_write_gguf(t, NULL, &e), RB_E_INVALID);
    rb_tokenizer_free(t);
    rb_tokenizer_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_vs_naive),   cmocka_unit_test(test_byte_level), cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_added_tokens),   cmocka_unit_test(test_nfc),        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
