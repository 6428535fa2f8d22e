/* Exactness against HF `tokenizers`: for every hard string of the corpus and
 * each real tokenizer (Llama 2, Llama 3, Llama 3.1, Qwen3, Gemma 3, gpt-oss), the ids
 * with and without special tokens, the decoded text of both, and the
 * streamed decode must equal what HF produced (tests/data/tokenizer); the
 * tokens' pieces concatenated must give HF's decode. */
#include "tokref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *stream_decode(const rb_tokenizer *t, const int32_t *ids, size_t n) {
    rb_tokenizer_stream *s;
    rb_error e;
    TU_OK(rb_tokenizer_stream_create(t, 0, &s, &e));
    size_t cap = 64, len = 0;
    char *acc = malloc(cap);
    assert_non_null(acc);
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t pl;
        if (i < n) TU_OK(rb_tokenizer_stream_push(s, ids[i], &piece, &pl, &e));
        else TU_OK(rb_tokenizer_stream_flush(s, &piece, &pl, &e));
        /* never a partial UTF-8 character in a piece pushed before the end */
        if (i < n && pl) {
            const unsigned char *u = (const unsigned char *)piece;
            size_t k = pl;
            while (k > 0 && (u[k - 1] & 0xC0) == 0x80) k--;
            if (k > 0 && u[k - 1] >= 0xC0) {
                size_t need = u[k - 1] >= 0xF0 ? 4 : u[k - 1] >= 0xE0 ? 3 : 2;
                assert_int_equal(pl - (k - 1), need);
            }
        }
        while (len + pl + 1 > cap) {
            cap *= 2;
            acc = realloc(acc, cap);
            assert_non_null(acc);
        }
        memcpy(acc + len, piece, pl);
        len += pl;
    }
    acc[len] = 0;
    rb_tokenizer_stream_free(s);
    return acc;
}

/* The pieces of ids (rb_tokenizer_token_piece) concatenated must give HF's
 * decode of them: exactly for byte-level tokenizers; SentencePiece decoders
 * may also drop the first piece's leading space (Strip, Metaspace's
 * prepend). Cases whose pieces are not complete UTF-8 (HF decodes them to
 * U+FFFD) are left out. Returns 1 on a mismatch. */
static int check_pieces(const char *name, const rb_tokenizer *t, const tokref_case *c, int *skipped) {
    size_t cap = 256, len = 0;
    char *acc = malloc(cap);
    assert_non_null(acc);
    rb_error e;
    for (size_t i = 0; i < c->n_plain; i++) {
        char *p = NULL;
        size_t pl = 0;
        TU_OK(rb_tokenizer_token_piece(t, c->ids_plain[i], &p, &pl, &e));
        assert_int_equal(p[pl], 0); /* NUL-terminated */
        while (len + pl + 1 > cap) {
            cap *= 2;
            acc = realloc(acc, cap);
            assert_non_null(acc);
        }
        memcpy(acc + len, p, pl);
        len += pl;
        free(p);
    }
    acc[len] = 0;
    int bad = 0;
    const size_t dl = strlen(c->decoded_plain);
    bool valid = true;
    for (size_t i = 0; i < len && valid;) { /* plain UTF-8 check (no overlongs in tokenizer output) */
        unsigned char b = (unsigned char)acc[i];
        size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0 || i + n > len) valid = false;
        for (size_t k = 1; k < n && valid; k++) valid = ((unsigned char)acc[i + k] & 0xC0) == 0x80;
        i += n ? n : 1;
    }
    if (!valid) {
        (*skipped)++;
    } else {
        bool same = len == dl && memcmp(acc, c->decoded_plain, len) == 0;
        bool strip = rb_tokenizer_get_kind(t) == RB_TOKENIZER_SPM && len == dl + 1 && acc[0] == ' ' &&
                     memcmp(acc + 1, c->decoded_plain, dl) == 0;
        if (!same && !strip) {
            fprintf(stderr, "[%s] pieces \"%s\" != HF decode \"%s\"\n", name, acc, c->decoded_plain);
            bad = 1;
        }
    }
    free(acc);
    return bad;
}

static void check_tokenizer(const char *name) {
    double t0 = tokref_now();
    rb_tokenizer *t = tokref_tokenizer(name);
    double t1 = tokref_now();
    tokref r;
    tokref_load(&r, name);
    int bad = 0, piece_skips = 0;
    rb_error e;
    for (size_t i = 0; i < r.n; i++) {
        const tokref_case *c = &r.cases[i];
        bad += check_pieces(name, t, c, &piece_skips);
        int32_t *ids;
        size_t n;
        TU_OK(rb_tokenizer_encode(t, c->text, c->text_len, RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL, &ids, &n, &e));
        bad += !tokref_ids_equal("ids_special", c->text, ids, n, c->ids_special, c->n_special);
        free(ids);
        TU_OK(rb_tokenizer_encode(t, c->text, c->text_len, RB_TOK_PARSE_SPECIAL, &ids, &n, &e));
        bad += !tokref_ids_equal("ids_plain", c->text, ids, n, c->ids_plain, c->n_plain);
        free(ids);
        char *txt;
        size_t tl;
        TU_OK(rb_tokenizer_decode(t, c->ids_special, c->n_special, 0, &txt, &tl, &e));
        if (strcmp(txt, c->decoded) != 0) {
            fprintf(stderr, "[%s] decode mismatch: got \"%s\" want \"%s\"\n", name, txt, c->decoded);
            bad++;
        }
        assert_int_equal(tl, strlen(txt));
        free(txt);
        TU_OK(rb_tokenizer_decode(t, c->ids_plain, c->n_plain, 0, &txt, &tl, &e));
        if (strcmp(txt, c->decoded_plain) != 0) {
            fprintf(stderr, "[%s] decode_plain mismatch: got \"%s\" want \"%s\"\n", name, txt, c->decoded_plain);
            bad++;
        }
        free(txt);
        char *st = stream_decode(t, c->ids_special, c->n_special);
        if (strcmp(st, c->decoded) != 0) {
            fprintf(stderr, "[%s] stream mismatch: got \"%s\" want \"%s\"\n", name, st, c->decoded);
            bad++;
        }
        free(st);
    }
    fprintf(stderr, "[%s] %zu cases (%d without complete UTF-8 pieces), load %.3f s, %d mismatches\n", name, r.n,
            piece_skips, t1 - t0, bad);
    /* a byte token's piece is its byte; an id outside the vocabulary is refused */
    int32_t bt = rb_tokenizer_token_id(t, "<0x0A>", 6);
    if (bt >= 0) {
        char *p = NULL;
        size_t pl = 0;
        TU_OK(rb_tokenizer_token_piece(t, bt, &p, &pl, &e));
        assert_int_equal(pl, 1);
        assert_int_equal(p[0], '\n');
        free(p);
    }
    char *none = NULL;
    assert_int_equal(rb_tokenizer_token_piece(t, rb_tokenizer_n_vocab(t), &none, NULL, &e), RB_E_RANGE);
    assert_null(none);
    tokref_free(&r);
    rb_tokenizer_free(t);
    assert_int_equal(bad, 0);
}

/* Encodes ~100 KB of corpus strings in one call, reports the time, and
 * checks that decoding gives the text back (HF's decode round trip). */
static void perf_100k(const char *name) {
    rb_tokenizer *t = tokref_tokenizer(name);
    tokref r;
    tokref_load(&r, name);
    size_t cap = 110 * 1024, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    while (len < 100 * 1024) {
        for (size_t i = 0; i < r.n && len < 100 * 1024; i++) {
            const tokref_case *c = &r.cases[i];
            /* only strings HF itself round-trips (Qwen's NFC changes some) */
            if (strlen(c->decoded_plain) != c->text_len || memcmp(c->decoded_plain, c->text, c->text_len) != 0) continue;
            if (len + c->text_len + 1 > cap) break;
            memcpy(text + len, c->text, c->text_len);
            len += c->text_len;
            text[len++] = '\n';
        }
    }
    int32_t *ids;
    size_t n;
    rb_error e;
    double t0 = tokref_now();
    TU_OK(rb_tokenizer_encode(t, text, len, 0, &ids, &n, &e));
    double t1 = tokref_now();
    char *dec;
    size_t dl;
    TU_OK(rb_tokenizer_decode(t, ids, n, 0, &dec, &dl, &e));
    double t2 = tokref_now();
    fprintf(stderr, "[%s] encode %zu bytes -> %zu ids in %.1f ms, decode %.1f ms\n", name, len, n, 1e3 * (t1 - t0),
            1e3 * (t2 - t1));
    if (dl != len || memcmp(dec, text, len) != 0) {
        size_t k = 0;
        while (k < len && k < dl && dec[k] == text[k]) k++;
        fprintf(stderr, "[%s] round trip differs at byte %zu: \"%.40s\" vs \"%.40s\"\n", name, k, dec + k, text + k);
    }
    assert_int_equal(dl, len);
    assert_memory_equal(dec, text, len);
    assert_true(t1 - t0 < 5.0); /* generous: sanitizer builds are slow */
    free(dec);
    free(ids);
    free(text);
    tokref_free(&r);
    rb_tokenizer_free(t);
}

static void test_perf(void **state) {
    (void)state;
    perf_100k("llama2");
    perf_100k("llama3");
    perf_100k("qwen3");
    perf_100k("gemma3");
    perf_100k("gptoss");
}

static void test_llama2(void **state) { (void)state; check_tokenizer("llama2"); }
static void test_llama3(void **state) { (void)state; check_tokenizer("llama3"); }
static void test_llama3_1(void **state) { (void)state; check_tokenizer("llama3_1"); }
static void test_qwen3(void **state) { (void)state; check_tokenizer("qwen3"); }
static void test_gemma3(void **state) { (void)state; check_tokenizer("gemma3"); }
static void test_gptoss(void **state) { (void)state; check_tokenizer("gptoss"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2), cmocka_unit_test(test_llama3), cmocka_unit_test(test_llama3_1),
        cmocka_unit_test(test_qwen3), cmocka_unit_test(test_gemma3), cmocka_unit_test(test_gptoss),
        cmocka_unit_test(test_perf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
