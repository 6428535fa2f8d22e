/* Unigram (SentencePiece) tokenizer tests. References: sentencepiece 0.2.2's
 * ids for 20 varied strings on the test model (tests/data/sd3/t5tok/
 * cases.json: accents, full-width letters, ligatures, emoji, CJK, tabs,
 * runs of spaces, the empty string, special-token text), read from
 * spiece.model; the same through tokenizer.json against the `tokenizers`
 * library's ids (key "tokenizers", when present) or, until then, against
 * sentencepiece's on the plain single-spaced ASCII strings where the two
 * libraries agree; a hand-built model and charsmap whose segmentations are
 * worked out by hand (unknown characters merged into one unk, as
 * sentencepiece does; leading/trailing/repeated spaces; a charsmap rule);
 * padding and truncation as transformers' padding="max_length",
 * truncation=True; and every bad-input path (missing files, truncated and
 * corrupt protobufs, bad base64, a charsmap whose trie points outside
 * itself, invalid UTF-8). */
#include "testutil.h"

#include "rbee/unigram_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[4096];

/* TU_OK that also prints the error message. */
#define OKE(expr)                                                                                              \
    do {                                                                                                       \
        rb_status s_ = (expr);                                                                                 \
        if (s_ != RB_OK) fail_msg("%s -> %s: %s", #expr, rb_status_str(s_), err.msg);                          \
    } while (0)

static const char *t5tok(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "sd3/t5tok/%s", file);
    return tu_data(g_dir, sizeof g_dir, rel);
}

static json_t *load_cases(void) {
    json_error_t je;
    json_t *root = json_load_file(t5tok("cases.json"), 0, &je);
    if (!root) fail_msg("cases.json: %s", je.text);
    return root;
}

static void check_ids(const char *what, const char *text, const int32_t *got, size_t n, json_t *want) {
    bool ok = n == json_array_size(want);
    for (size_t i = 0; ok && i < n; i++) ok = got[i] == json_integer_value(json_array_get(want, i));
    if (!ok) {
        char g[2048] = "", *p = g;
        for (size_t i = 0; i < n && p < g + sizeof g - 16; i++) p += sprintf(p, "%d ", (int)got[i]);
        char *w = json_dumps(want, JSON_COMPACT);
        fail_msg("%s: \"%s\": got [%s] want %s", what, text, g, w);
    }
}

static void test_spm_cases(void **state) {
    (void)state;
    rb_unigram *t;
    rb_error err;
    OKE(rb_unigram_load_spm(t5tok("spiece.model"), &t, &err));
    assert_int_equal(rb_unigram_n_vocab(t), 1000);
    assert_int_equal(rb_unigram_pad_id(t), 0);
    assert_int_equal(rb_unigram_eos_id(t), 1);
    assert_int_equal(rb_unigram_unk_id(t), 2);
    json_t *root = load_cases(), *c;
    size_t i;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        int32_t *ids;
        size_t n;
        OKE(rb_unigram_tokenize(t, text, strlen(text), true, &ids, &n, &err));
        check_ids("spiece.model", text, ids, n, json_object_get(c, "sentencepiece"));
        json_t *pieces = json_object_get(c, "pieces");
        assert_int_equal(json_array_size(pieces) + 1, n);
        for (size_t k = 0; k + 1 < n; k++) {
            size_t pl;
            const char *p = rb_unigram_piece(t, ids[k], &pl);
            const char *want = json_string_value(json_array_get(pieces, k));
            assert_non_null(p);
            assert_true(pl == strlen(want) && memcmp(p, want, pl) == 0);
        }
        free(ids);
    }
    json_decref(root);
    rb_unigram_free(t);
}

/* Plain ASCII, single spaces, no leading/trailing space: sentencepiece and
 * tokenizers' Metaspace pipeline agree there. */
static bool plain(const char *s) {
    if (!*s || s[0] == ' ' || s[strlen(s) - 1] == ' ' || strstr(s, "  ") || strchr(s, '<')) return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7E) return false;
    return true;
}

static void json_cases(const char *path, bool require_tokenizers) {
    rb_unigram *t;
    rb_error err;
    OKE(rb_unigram_load_json(path, &t, &err));
    assert_int_equal(rb_unigram_n_vocab(t), 1000);
    assert_int_equal(rb_unigram_eos_id(t), 1);
    assert_int_equal(rb_unigram_unk_id(t), 2);
    json_t *root = load_cases(), *c;
    size_t i, checked = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "tokenizers");
        if (!want && !require_tokenizers && plain(text)) want = json_object_get(c, "sentencepiece");
        if (!want) continue;
        int32_t *ids;
        size_t n;
        OKE(rb_unigram_tokenize(t, text, strlen(text), true, &ids, &n, &err));
        check_ids("tokenizer.json", text, ids, n, want);
        free(ids);
        checked++;
    }
    assert_true(checked >= 4);
    json_decref(root);
    rb_unigram_free(t);
}

static void test_json_cases(void **state) {
    (void)state;
    json_cases(t5tok("tokenizer.json"), false);
}

/* Special-token text: tokenizer.json splits "<pad>", "</s>", "<unk>" out of
 * the raw text first; sentencepiece does not (cases.json's last string). */
static void test_json_added_tokens(void **state) {
    (void)state;
    rb_unigram *t;
    rb_error err;
    OKE(rb_unigram_load_json(t5tok("tokenizer.json"), &t, &err));
    const char *text = "x</s>x";
    int32_t *ids;
    size_t n;
    OKE(rb_unigram_tokenize(t, text, strlen(text), true, &ids, &n, &err));
    /* "x" -> "▁x" (275), </s> (1), "x" -> "▁x" (Metaspace prepends "▁" to each segment), then </s> */
    const int32_t want[] = {275, 1, 275, 1};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    rb_unigram_free(t);
}

static void test_padded(void **state) {
    (void)state;
    rb_unigram *t;
    rb_error err;
    OKE(rb_unigram_load_spm(t5tok("spiece.model"), &t, &err));
    int32_t ids[24];
    size_t n;
    OKE(rb_unigram_encode_padded(t, "a photo of a cat", 16, ids, 24, &n, &err));
    const int32_t want[11] = {103, 3, 24, 54, 25, 81, 60, 103, 3, 260, 1};
    assert_int_equal(n, 11);
    assert_memory_equal(ids, want, sizeof want);
    for (int i = 11; i < 24; i++) assert_int_equal(ids[i], 0);
    /* truncation keeps </s> last: the first 5 tokens, then 1 */
    OKE(rb_unigram_encode_padded(t, "a photo of a cat", 16, ids, 6, &n, &err));
    assert_int_equal(n, 11);
    const int32_t cut[6] = {103, 3, 24, 54, 25, 1};
    assert_memory_equal(ids, cut, sizeof cut);
    OKE(rb_unigram_encode_padded(t, "", 0, ids, 3, &n, &err));
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 0);
    assert_int_equal(rb_unigram_encode_padded(t, "a", 1, ids, 0, NULL, &err), RB_E_INVALID);
    rb_unigram_free(t);
}

/* ---- a hand-built model ---- */

typedef struct pbw {
    uint8_t b[8192];
    size_t n;
} pbw;

static void put_varint(pbw *w, uint64_t v) {
    do {
        uint8_t c = v & 0x7F;
        v >>= 7;
        w->b[w->n++] = (uint8_t)(c | (v ? 0x80 : 0));
    } while (v);
}
static void put_bytes(pbw *w, uint32_t field, const void *d, size_t n) {
    put_varint(w, (uint64_t)field << 3 | 2);
    put_varint(w, n);
    memcpy(w->b + w->n, d, n);
    w->n += n;
}
static void put_int(pbw *w, uint32_t field, int64_t v) {
    put_varint(w, (uint64_t)field << 3);
    put_varint(w, (uint64_t)v);
}
static void put_piece(pbw *w, const char *text, float score, int type) {
    pbw p = {.n = 0};
    put_bytes(&p, 1, text, strlen(text));
    uint32_t u;
    memcpy(&u, &score, 4);
    put_varint(&p, 2 << 3 | 5);
    for (int i = 0; i < 4; i++) p.b[p.n++] = (uint8_t)(u >> (8 * i));
    put_int(&p, 3, type);
    put_bytes(w, 1, p.b, p.n);
}

/* A darts-clone trie with the one key "A" -> "a": root offset 2, so the
 * child of 'A' (0x41) sits at 2 ^ 0x41 = 67; it has a leaf and offset 1, so
 * its value unit is 67 ^ 1 = 66 (bit 31 set, value 0: the string "a"). */
static size_t make_charsmap(uint8_t *out, uint32_t leaf_offset, uint32_t value) {
    uint32_t units[68] = {0};
    units[0] = 2u << 10;
    units[67] = 0x41u | (1u << 8) | (leaf_offset << 10);
    units[66] = (1u << 31) | value;
    const uint32_t tsize = sizeof units;
    memcpy(out, &tsize, 4);
    memcpy(out + 4, units, sizeof units);
    memcpy(out + 4 + sizeof units, "a\0", 2);
    return 4 + sizeof units + 2;
}

static size_t make_model(uint8_t *out, const uint8_t *cm, size_t cm_len) {
    pbw w = {.n = 0};
    put_piece(&w, "<unk>", 0.0f, 2);
    put_piece(&w, "</s>", 0.0f, 3);
    put_piece(&w, "\xE2\x96\x81", -2.0f, 1);     /* 2: ▁ */
    put_piece(&w, "a", -3.0f, 1);                /* 3 */
    put_piece(&w, "b", -3.0f, 1);                /* 4 */
    put_piece(&w, "\xE2\x96\x81" "ab", -4.0f, 1); /* 5: ▁ab (better than ▁ + a + b = -8) */
    put_piece(&w, "\xE2\x96\x81" "a", -5.5f, 1);  /* 6: ▁a + b = -8.5, worse than ▁ab */
    pbw tr = {.n = 0};
    put_int(&tr, 40, 0);
    put_int(&tr, 42, 1);
    put_int(&tr, 43, -1);
    put_bytes(&w, 2, tr.b, tr.n);
    if (cm) {
        pbw ns = {.n = 0};
        put_bytes(&ns, 2, cm, cm_len);
        put_bytes(&w, 3, ns.b, ns.n);
    }
    memcpy(out, w.b, w.n);
    return w.n;
}

static void expect(rb_unigram *t, const char *text, const int32_t *want, size_t nw) {
    int32_t *ids;
    size_t n;
    rb_error err;
    OKE(rb_unigram_tokenize(t, text, strlen(text), false, &ids, &n, &err));
    if (n != nw || (n && memcmp(ids, want, n * sizeof *ids))) {
        char g[512] = "", *p = g;
        for (size_t i = 0; i < n && i < 40; i++) p += sprintf(p, "%d ", (int)ids[i]);
        fail_msg("\"%s\": got [%s]", text, g);
    }
    free(ids);
}

static void test_hand_model(void **state) {
    (void)state;
    uint8_t cm[400], model[8192];
    const size_t cml = make_charsmap(cm, 1, 0);
    const size_t ml = make_model(model, cm, cml);
    rb_unigram *t;
    rb_error err;
    OKE(rb_unigram_from_spm_memory(model, ml, &t, &err));
    assert_int_equal(rb_unigram_pad_id(t), 0); /* pad_id -1: 0 as transformers' T5 uses */
    expect(t, "ab", (const int32_t[]){5}, 1);
    expect(t, "  ab   ab ", (const int32_t[]){5, 5}, 2); /* extra whitespace removed */
    expect(t, "Ab", (const int32_t[]){5}, 1);           /* charsmap A -> a */
    expect(t, "ba", (const int32_t[]){2, 4, 3}, 3);     /* ▁ b a */
    /* unknown characters: consecutive ones merge into one unk id */
    expect(t, "a\xE6\x97\xA5\xE6\x9C\xAC" "b", (const int32_t[]){2, 3, 0, 4}, 4); /* ▁ + a (-5) beats ▁a (-5.5) */
    expect(t, "\xE6\x97\xA5 \xE6\x9C\xAC", (const int32_t[]){2, 0, 2, 0}, 4);
    expect(t, "", NULL, 0);
    expect(t, "   ", NULL, 0);
    rb_unigram_free(t);

    /* a charsmap whose leaf points outside the trie, or whose value points
     * outside the replacements, or whose size field overruns */
    size_t l2 = make_charsmap(cm, 1000, 0);
    size_t m2 = make_model(model, cm, l2);
    assert_int_equal(rb_unigram_from_spm_memory(model, m2, &t, &err), RB_E_FORMAT);
    l2 = make_charsmap(cm, 1, 57);
    m2 = make_model(model, cm, l2);
    assert_int_equal(rb_unigram_from_spm_memory(model, m2, &t, &err), RB_E_FORMAT);
    l2 = make_charsmap(cm, 1, 0);
    const uint32_t big = 4000;
    memcpy(cm, &big, 4);
    m2 = make_model(model, cm, l2);
    assert_int_equal(rb_unigram_from_spm_memory(model, m2, &t, &err), RB_E_FORMAT);
    assert_null(t);
}

static void test_bad_input(void **state) {
    (void)state;
    rb_unigram *t = (rb_unigram *)1;
    rb_error err;
    assert_int_equal(rb_unigram_load_spm("/nonexistent/spiece.model", &t, &err), RB_E_IO);
    assert_null(t);
    assert_int_equal(rb_unigram_load_json("/nonexistent/tokenizer.json", &t, &err), RB_E_IO);
    assert_int_equal(rb_unigram_load_dir("/nonexistent", &t, &err), RB_E_IO);
    /* truncated protobuf: every cut either fails cleanly or (a cut on a field
     * boundary after the pieces) loads */
    size_t len;
    uint8_t *data = tu_read_file(t5tok("spiece.model"), &len);
    int failed = 0;
    for (size_t cut = 0; cut < len; cut += 1 + cut / 50) {
        rb_status s = rb_unigram_from_spm_memory(data, cut, &t, &err);
        if (s == RB_OK) rb_unigram_free(t);
        else {
            assert_int_equal(s, RB_E_FORMAT);
            assert_null(t);
            failed++;
        }
    }
    assert_true(failed > 100);
    /* corrupt bytes: never a crash; a bad wire type or length is FORMAT */
    uint8_t *bad = malloc(len);
    assert_non_null(bad);
    tu_rng rng;
    tu_rng_seed(&rng, 38);
    for (int k = 0; k < 200; k++) {
        memcpy(bad, data, len);
        for (int j = 0; j < 4; j++) bad[tu_rng_u64(&rng) % len] = (uint8_t)tu_rng_u64(&rng);
        rb_status s = rb_unigram_from_spm_memory(bad, len, &t, &err);
        if (s == RB_OK) {
            int32_t *ids;
            size_t n;
            if (rb_unigram_tokenize(t, "a photo of a cat", 16, true, &ids, &n, &err) == RB_OK) free(ids);
            rb_unigram_free(t);
        }
    }
    bad[0] = 0x0B; /* field 1, wire type 3 (group) */
    assert_int_equal(rb_unigram_from_spm_memory(bad, len, &t, &err), RB_E_FORMAT);
    free(bad);
    free(data);
    /* tokenizer.json: bad base64, a non-Unigram model, a bad vocab entry */
    char *js = tu_read_file(t5tok("tokenizer.json"), &len);
    char *p = strstr(js, "\"precompiled_charsmap\": \"");
    assert_non_null(p);
    p += strlen("\"precompiled_charsmap\": \"");
    char save = p[3];
    p[3] = '*';
    assert_int_equal(rb_unigram_from_json_memory(js, len, &t, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "base64"));
    p[3] = save;
    /* a charsmap whose trie size field overruns it: "/////" -> 0xFFFFFFFF.. */
    char s4[4];
    memcpy(s4, p, 4);
    memcpy(p, "////", 4);
    assert_int_equal(rb_unigram_from_json_memory(js, len, &t, &err), RB_E_FORMAT);
    memcpy(p, s4, 4);
    char *u = strstr(js, "\"Unigram\"");
    assert_non_null(u);
    memcpy(u, "\"BPEgram\"", 9);
    assert_int_equal(rb_unigram_from_json_memory(js, len, &t, &err), RB_E_UNSUPPORTED);
    memcpy(u, "\"Unigram\"", 9);
    OKE(rb_unigram_from_json_memory(js, len, &t, &err));
    rb_unigram_free(t);
    assert_int_equal(rb_unigram_from_json_memory("{", 1, &t, &err), RB_E_FORMAT);
    assert_int_equal(rb_unigram_from_json_memory("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\"]]}}", 40, &t, &err),
                     RB_E_FORMAT);
    free(js);
    /* invalid UTF-8 text */
    OKE(rb_unigram_load_spm(t5tok("spiece.model"), &t, &err));
    int32_t *ids;
    size_t n;
    assert_int_equal(rb_unigram_tokenize(t, "ab\xC3(", 4, true, &ids, &n, &err), RB_E_INVALID);
    assert_null(ids);
    int32_t pad[8];
    assert_int_equal(rb_unigram_encode_padded(t, "\xFF", 1, pad, 8, NULL, &err), RB_E_INVALID);
    rb_unigram_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_cases),  cmocka_unit_test(test_json_cases), cmocka_unit_test(test_json_added_tokens),
        cmocka_unit_test(test_padded),     cmocka_unit_test(test_hand_model), cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
