/* CLIP tokenizer tests. References: the token ids diffusers recorded for the
 * fixture pipelines' prompts (refs/<name>/meta.json), with both pad
 * conventions; transformers' CLIPTokenizer ids for 200+ varied prompts
 * (tests/data/tokenizer/clip/clip_refs.json, made by gen_clip_refs.py;
 * skipped while absent); a naive BPE and word splitter written here from the
 * published algorithm, run on the fixture's vocab.json/merges.txt; the
 * shipped OpenAI .txt.gz against vocab.json; published examples (diffusers
 * issue #4153 for the "!" pad quirk, A1111's parse_prompt_attention
 * doctests); hand-computed A1111 chunk layouts; and every bad-input path. */
#include "testutil.h"

#include "rbee/clip_tokenizer.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BOS 49406
#define EOS 49407

static char g_path[4096];

static const char *fixture_dir(const char *rel) { return tu_fixture(g_path, sizeof g_path, rel); }

/* The fixtures store files shared between pipelines as small text files
 * holding the relative path of the real file (git's form of a symlink). A
 * tokenizer folder with such stubs is loaded through a temporary folder of
 * real symlinks. */
static bool stub_target(const char *path, char *out, size_t cap) {
    size_t n = 0;
    char *txt = tu_read_file(path, &n);
    bool stub = n < 512 && strncmp(txt, "../", 3) == 0;
    if (stub) {
        while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ')) txt[--n] = '\0';
        const char *slash = strrchr(path, '/');
        char rel[4096];
        snprintf(rel, sizeof rel, "%.*s/%s", (int)(slash - path), path, txt);
        if (!realpath(rel, out) || strlen(out) >= cap) fail_msg("cannot resolve %s -> %s", path, rel);
    }
    free(txt);
    return stub;
}

static rb_clip_tokenizer *load_dir(const char *rel) {
    char buf[4096], tmp[64] = "";
    static const char *const files[3] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
    const char *dir = tu_fixture(buf, sizeof buf, rel);
    char src[3][PATH_MAX];
    bool any = false;
    for (int i = 0; i < 3; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (!stub_target(p, src[i], sizeof src[i])) snprintf(src[i], sizeof src[i], "%s", p);
        else any = true;
    }
    if (any) {
        assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "cliptok"), 0);
        for (int i = 0; i < 3; i++) {
            char d[128];
            snprintf(d, sizeof d, "%s/%s", tmp, files[i]);
            if (symlink(src[i], d) != 0) fail_msg("cannot link %s", d);
        }
        dir = tmp;
    }
    rb_clip_tokenizer *t = NULL;
    rb_error e;
    rb_status st = rb_clip_tokenizer_load_dir(dir, &t, &e);
    if (any) assert_int_equal(tu_tmpdir_remove(tmp), 0);
    if (st) fail_msg("load %s: %s", rel, e.msg);
    return t;
}

static bool ids_equal(const char *what, const char *text, const int32_t *got, size_t n_got, const json_t *want) {
    size_t n = json_array_size(want);
    bool ok = n == n_got;
    for (size_t i = 0; ok && i < n; i++) ok = json_integer_value(json_array_get(want, i)) == got[i];
    if (!ok) {
        fprintf(stderr, "%s mismatch for \"%s\"\n  got :", what, text);
        for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, "\n  want:");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
        fprintf(stderr, "\n");
    }
    return ok;
}

static int32_t *tokenize(const rb_clip_tokenizer *t, const char *s, unsigned flags, size_t *n) {
    int32_t *ids = NULL;
    rb_error e;
    rb_status st = rb_clip_tokenize(t, s, strlen(s), flags, &ids, n, &e);
    if (st) fail_msg("tokenize \"%s\": %s", s, e.msg);
    return ids;
}

static void expect_tokens(const rb_clip_tokenizer *t, const char *s, unsigned flags, const int32_t *want, size_t n_want) {
    size_t n = 0;
    int32_t *ids = tokenize(t, s, flags, &n);
    bool ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "tokens of \"%s\":", s);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n want:");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", (int)want[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    assert_true(ok);
}

static int32_t vid(const rb_clip_tokenizer *t, const char *text) {
    int32_t id = rb_clip_token_id(t, text, strlen(text));
    if (id < 0) fail_msg("'%s' not in the vocabulary", text);
    return id;
}

/* ---- the fixtures' recorded ids, both pad conventions ---- */

/* meta.json holds Python's non-standard -Infinity / Infinity / NaN as some
 * scheduler values; they become null (blank-padded) before parsing. */
static json_t *load_meta(const char *path) {
    size_t n = 0;
    char *txt = tu_read_file(path, &n);
    static const char *const bad[] = {"-Infinity", "Infinity", "NaN"};
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            size_t l = strlen(bad[k]);
            if (i + l > n || memcmp(txt + i, bad[k], l) != 0) continue;
            size_t j = i;
            while (j > 0 && (txt[j - 1] == ' ' || txt[j - 1] == '\n')) j--;
            if (j == 0 || !strchr(":,[", txt[j - 1])) continue;
            memcpy(txt + i, "null", 4);
            memset(txt + i + 4, ' ', l - 4);
            break;
        }
    }
    json_error_t je;
    json_t *j = json_loadb(txt, n, 0, &je);
    if (!j) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    free(txt);
    return j;
}

static void check_meta(const char *name) {
    char rel[256], buf[4096];
    snprintf(rel, sizeof rel, "diffusers/refs/%s/meta.json", name);
    json_t *meta = load_meta(tu_fixture(buf, sizeof buf, rel));
    snprintf(rel, sizeof rel, "diffusers/pipelines/%s/", name);
    rb_clip_tokenizer *eot = load_dir("diffusers/pipelines/sd15/tokenizer");
    rb_clip_tokenizer *excl = load_dir("diffusers/pipelines/sd21v/tokenizer");
    assert_int_equal(rb_clip_pad_id(eot), EOS);
    assert_int_equal(rb_clip_pad_id(excl), 0);
    json_t *toks = json_object_get(json_object_get(meta, "text"), "tokenizers");
    assert_true(json_object_size(toks) > 0);
    const char *tk;
    json_t *tags;
    int checked = 0;
    json_object_foreach(toks, tk, tags) {
        char d[512];
        snprintf(d, sizeof d, "%s%s", rel, tk);
        rb_clip_tokenizer *own = load_dir(d);
        const char *tag;
        json_t *c;
        json_object_foreach(tags, tag, c) {
            const char *text = json_string_value(json_object_get(c, "text"));
            json_t *want = json_object_get(c, "input_ids"), *untr = json_object_get(c, "untruncated_ids");
            assert_non_null(text);
            int32_t ids[RB_CLIP_CONTEXT];
            size_t n_untr = 0;
            rb_error e;
            TU_OK(rb_clip_encode(own, text, strlen(text), 0, ids, &n_untr, &e));
            assert_true(ids_equal("input_ids", text, ids, RB_CLIP_CONTEXT, want));
            int32_t *raw = NULL;
            size_t n_raw = 0;
            TU_OK(rb_clip_tokenize(own, text, strlen(text), 0, &raw, &n_raw, &e));
            assert_int_equal(n_raw + 2, n_untr);
            int32_t *full = malloc((n_raw + 2) * sizeof *full);
            assert_non_null(full);
            full[0] = BOS;
            if (n_raw) memcpy(full + 1, raw, n_raw * sizeof *raw);
            full[n_raw + 1] = EOS;
            assert_true(ids_equal("untruncated_ids", text, full, n_raw + 2, untr));
            /* the other pad convention: same prompt ids, other padding */
            for (int p = 0; p < 2; p++) {
                const rb_clip_tokenizer *o = p ? excl : eot;
                int32_t pad = p ? 0 : EOS, got[RB_CLIP_CONTEXT];
                TU_OK(rb_clip_encode(o, text, strlen(text), 0, got, NULL, &e));
                size_t keep = n_raw < 75 ? n_raw : 75;
                assert_int_equal(got[0], BOS);
                for (size_t i = 0; i < keep; i++) assert_int_equal(got[1 + i], full[1 + i]);
                assert_int_equal(got[1 + keep], EOS);
                for (size_t i = 2 + keep; i < RB_CLIP_CONTEXT; i++) assert_int_equal(got[i], pad);
            }
            free(full);
            free(raw);
            checked++;
        }
        rb_clip_tokenizer_free(own);
    }
    assert_true(checked >= 2);
    rb_clip_tokenizer_free(eot);
    rb_clip_tokenizer_free(excl);
    json_decref(meta);
}

static void test_fixture_sd15(void **s) { (void)s; check_meta("sd15"); }
static void test_fixture_sd21v(void **s) { (void)s; check_meta("sd21v"); }
static void test_fixture_sdxl(void **s) { (void)s; check_meta("sdxl"); }
static void test_fixture_sd15_inpaint(void **s) { (void)s; check_meta("sd15-inpaint"); }

/* ---- the shipped OpenAI vocabulary equals the published vocab.json ---- */

static rb_clip_tokenizer *load_gz(const rb_clip_special_tokens *sp) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/clip/bpe_simple_vocab_16e6.txt.gz", RBEE_SOURCE_DIR);
    rb_clip_tokenizer *t = NULL;
    rb_error e;
    rb_status st = rb_clip_tokenizer_load_bpe_gz(path, sp, &t, &e);
    if (st) fail_msg("%s", e.msg);
    return t;
}

static void test_gz_matches_vocab_json(void **s) {
    (void)s;
    rb_clip_tokenizer *gz = load_gz(NULL);
    json_error_t je;
    json_t *v = json_load_file(fixture_dir("diffusers/pipelines/sd15/tokenizer/vocab.json"), 0, &je);
    assert_non_null(v);
    assert_int_equal(rb_clip_n_vocab(gz), 49408);
    assert_int_equal(json_object_size(v), 49408);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        size_t len = 0;
        const char *txt = rb_clip_token_text(gz, (int32_t)json_integer_value(val), &len);
        assert_non_null(txt);
        if (len != strlen(key) || memcmp(txt, key, len) != 0)
            fail_msg("id %lld: '%.*s' vs vocab.json '%s'", (long long)json_integer_value(val), (int)len, txt, key);
    }
    json_decref(v);
    assert_int_equal(rb_clip_bos_id(gz), BOS);
    assert_int_equal(rb_clip_eos_id(gz), EOS);
    assert_int_equal(rb_clip_pad_id(gz), EOS);
    /* same ids as the folder tokenizer on a mixed prompt (merges equal in rank) */
    rb_clip_tokenizer *dir = load_dir("diffusers/pipelines/sd15/tokenizer");
    const char *p = "A Photograph of an astronaut's horse, 4k!! naïve café — 東京 🐱 <|endoftext|> x";
    size_t n1 = 0, n2 = 0;
    int32_t *a = tokenize(gz, p, 0, &n1), *b = tokenize(dir, p, 0, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof *a);
    free(a);
    free(b);
    rb_clip_tokenizer_free(dir);
    rb_clip_tokenizer_free(gz);
    rb_clip_special_tokens sp = {.pad = "!"};
    gz = load_gz(&sp);
    assert_int_equal(rb_clip_pad_id(gz), 0);
    rb_clip_tokenizer_free(gz);
}

/* ---- naive reference: CLIP's word split (ASCII) and BPE, written from the
 * published algorithm, on the fixture's vocab.json / merges.txt ---- */

typedef struct {
    char **key;
    int32_t *val;
    size_t cap;
} strmap;

static uint64_t h64(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void map_put(strmap *m, const char *k, int32_t v) {
    size_t i = (size_t)h64(k) & (m->cap - 1);
    while (m->key[i] && strcmp(m->key[i], k) != 0) i = (i + 1) & (m->cap - 1);
    if (!m->key[i]) {
        m->key[i] = strdup(k);
        m->val[i] = v;
    }
}

static int32_t map_get(const strmap *m, const char *k) {
    size_t i = (size_t)h64(k) & (m->cap - 1);
    while (m->key[i]) {
        if (strcmp(m->key[i], k) == 0) return m->val[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static void map_free(strmap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
    free(m->key);
    free(m->val);
}

typedef struct {
    strmap vocab, ranks; /* ranks keyed by "a b" */
} naive_ref;

static void naive_load(naive_ref *r) {
    r->vocab.cap = r->ranks.cap = 1 << 17;
    r->vocab.key = calloc(r->vocab.cap, sizeof(char *));
    r->vocab.val = calloc(r->vocab.cap, sizeof(int32_t));
    r->ranks.key = calloc(r->ranks.cap, sizeof(char *));
    r->ranks.val = calloc(r->ranks.cap, sizeof(int32_t));
    json_error_t je;
    json_t *v = json_load_file(fixture_dir("diffusers/pipelines/sd15/tokenizer/vocab.json"), 0, &je);
    assert_non_null(v);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) map_put(&r->vocab, key, (int32_t)json_integer_value(val));
    json_decref(v);
    FILE *f = fopen(fixture_dir("diffusers/pipelines/sd15/tokenizer/merges.txt"), "r");
    assert_non_null(f);
    char line[512];
    int32_t rank = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "#version", 8) == 0) continue;
        map_put(&r->ranks, line, rank++);
    }
    fclose(f);
}

/* "a b" into out (size 2 * SYM + 2). */
#define SYM 128
static void pair_key(char *out, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    memcpy(out, a, la);
    out[la] = ' ';
    memcpy(out + la + 1, b, lb + 1);
}

/* BPE of an ASCII-printable word (the byte map is the identity there): merge
 * the lowest-ranked pair everywhere, left to right, until none applies. */
static void naive_bpe(const naive_ref *r, const char *w, int32_t *out, size_t *n_out) {
    static char sym[64][SYM];
    char pair[2 * SYM + 2];
    size_t n = strlen(w);
    assert_true(n < 64);
    for (size_t i = 0; i < n; i++) {
        sym[i][0] = w[i];
        strcpy(sym[i] + 1, i + 1 == n ? "</w>" : "");
    }
    for (;;) {
        int32_t best = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            pair_key(pair, sym[i], sym[i + 1]);
            int32_t rk = map_get(&r->ranks, pair);
            if (rk >= 0 && (best < 0 || rk < best)) best = rk;
        }
        if (best < 0) break;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            bool hit = false;
            if (i + 1 < n) {
                pair_key(pair, sym[i], sym[i + 1]);
                hit = map_get(&r->ranks, pair) == best;
            }
            if (hit) {
                size_t la = strlen(sym[i]), lb = strlen(sym[i + 1]);
                assert_true(la + lb < SYM);
                char joined[SYM];
                memcpy(joined, sym[i], la);
                memcpy(joined + la, sym[i + 1], lb + 1);
                memcpy(sym[m++], joined, la + lb + 1);
                i++;
            } else {
                if (m != i) memcpy(sym[m], sym[i], SYM);
                m++;
            }
        }
        n = m;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = map_get(&r->vocab, sym[i]);
        if (id < 0) fail_msg("naive: '%s' not in vocab", sym[i]);
        out[(*n_out)++] = id;
    }
}

/* CLIP's pattern on lower-case ASCII: contractions, letter runs, one digit,
 * runs of other non-space characters. */
static size_t naive_tokenize(const naive_ref *r, const char *s, int32_t *out) {
    static const char *const contr[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    size_t n_out = 0, i = 0, len = strlen(s);
    char w[64];
    while (i < len) {
        char c = s[i];
        if (c == ' ') { i++; continue; }
        size_t j = i, k;
        bool done = false;
        for (k = 0; k < 7 && !done; k++)
            if (strncmp(s + i, contr[k], strlen(contr[k])) == 0) { j = i + strlen(contr[k]); done = true; }
        if (!done) {
            if (c >= 'a' && c <= 'z') while (j < len && s[j] >= 'a' && s[j] <= 'z') j++;
            else if (c >= '0' && c <= '9') j = i + 1;
            else while (j < len && s[j] != ' ' && !(s[j] >= 'a' && s[j] <= 'z') && !(s[j] >= '0' && s[j] <= '9')) j++;
        }
        memcpy(w, s + i, j - i);
        w[j - i] = '\0';
        naive_bpe(r, w, out, &n_out);
        i = j;
    }
    return n_out;
}

static void test_bpe_against_naive(void **s) {
    (void)s;
    naive_ref r;
    naive_load(&r);
    rb_clip_tokenizer *t = load_dir("diffusers/pipelines/sd15/tokenizer");
    tu_rng rng;
    tu_rng_seed(&rng, 1234);
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyzeeeaaoo    ,.!?'-:;()0123456789";
    for (int it = 0; it < 3000; it++) {
        char p[128];
        size_t len = 1 + tu_rng_u64(&rng) % 60;
        for (size_t i = 0; i < len; i++) p[i] = alpha[tu_rng_u64(&rng) % (sizeof alpha - 1)];
        p[len] = '\0';
        int32_t want[256];
        size_t n_want = naive_tokenize(&r, p, want);
        expect_tokens(t, p, 0, want, n_want);
    }
    /* real words, long words and repeated pairs */
    static const char *const words[] = {"photograph", "astronaut", "extraordinarily", "aaaaaaaaaaaaaaaaaaaaaaaa",
                                        "abababababababab", "lighthouse", "hippopotomonstrosesquippedaliophobia",
                                        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "!!!!!!!!!!!!!!!!!!"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        int32_t want[256];
        size_t n_want = naive_tokenize(&r, words[i], want);
        expect_tokens(t, words[i], 0, want, n_want);
    }
    rb_clip_tokenizer_free(t);
    map_free(&r.vocab);
    map_free(&r.ranks);
}

/* ---- behaviour on published examples and hand-derived rules ---- */

static void test_pad_exclamation_quirk(void **s) {
    (void)s;
    /* diffusers issue #4153: SD2/SDXL tokenizer_2 turns every "!" into pad 0;
     * open_clip gives 256 748 995 for "! !! !!!" */
    rb_clip_tokenizer *t = load_dir("diffusers/pipelines/sdxl/tokenizer_2");
    int32_t ids[RB_CLIP_CONTEXT];
    rb_error e;
    TU_OK(rb_clip_encode(t, "! !! !!!", 8, 0, ids, NULL, &e));
    const int32_t want[9] = {BOS, 0, 0, 0, 0, 0, 0, EOS, 0};
    assert_memory_equal(ids, want, sizeof want);
    for (int i = 9; i < RB_CLIP_CONTEXT; i++) assert_int_equal(ids[i], 0);
    const int32_t oc[3] = {256, 748, 995};
    expect_tokens(t, "! !! !!!", RB_CLIP_PAD_AS_TEXT, oc, 3);
    rb_clip_tokenizer_free(t);
    /* with pad = eos, "!" is text either way */
    t = load_dir("diffusers/pipelines/sdxl/tokenizer");
    expect_tokens(t, "! !! !!!", 0, oc, 3);
    expect_tokens(t, "! !! !!!", RB_CLIP_PAD_AS_TEXT, oc, 3);
    rb_clip_tokenizer_free(t);
}

static void test_rules(void **s) {
    (void)s;
    rb_clip_tokenizer *t = load_dir("diffusers/pipelines/sd15/tokenizer");
    int32_t a = vid(t, "a</w>"), b = vid(t, "b</w>");
    /* lower-casing, whitespace runs of every White_Space kind */
    int32_t hello[4];
    size_t n = 0;
    int32_t *h = tokenize(t, "hello world", 0, &n);
    assert_int_equal(n, 2);
    memcpy(hello, h, 2 * sizeof *h);
    free(h);
    expect_tokens(t, "HeLLo   WORLD", 0, hello, 2);
    expect_tokens(t, " \t\n\v\f\r hello\xc2\x85\xc2\xa0\xe3\x80\x80world\xe2\x80\xa8 ", 0, hello, 2);
    /* special tokens in the text, split out before normalization */
    const int32_t sp[3] = {a, EOS, b};
    expect_tokens(t, "a<|endoftext|>b", 0, sp, 3);
    const int32_t sp2[4] = {BOS, a, EOS, b};
    expect_tokens(t, "<|startoftext|>a <|endoftext|> b", 0, sp2, 4);
    /* typed in capitals they are text: the ByteLevel step cuts "<|", "endoftext", "|>" */
    size_t n1, n2, n3, n4;
    int32_t *p1 = tokenize(t, "<|", 0, &n1), *p2 = tokenize(t, "endoftext", 0, &n2), *p3 = tokenize(t, "|>", 0, &n3);
    int32_t want[16];
    memcpy(want, p1, n1 * sizeof *p1);
    memcpy(want + n1, p2, n2 * sizeof *p2);
    memcpy(want + n1 + n2, p3, n3 * sizeof *p3);
    int32_t *p4 = tokenize(t, "<|ENDOFTEXT|>", 0, &n4);
    assert_int_equal(n4, n1 + n2 + n3);
    assert_memory_equal(p4, want, n4 * sizeof *p4);
    free(p1);
    free(p2);
    free(p3);
    free(p4);
    /* NFC: decomposed e + U+0301 equals precomposed U+00E9 */
    int32_t *c1 = tokenize(t, "cafe\xcc\x81", 0, &n1), *c2 = tokenize(t, "caf\xc3\xa9", 0, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(c1, c2, n1 * sizeof *c1);
    free(c1);
    free(c2);
    /* per-character lowercase: U+0130 -> i + U+0307, final capital sigma -> U+03C3 */
    c1 = tokenize(t, "\xc4\xb0", 0, &n1);
    c2 = tokenize(t, "i\xcc\x87", 0, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(c1, c2, n1 * sizeof *c1);
    free(c1);
    free(c2);
    c1 = tokenize(t, "\xce\x9f\xce\x94\xce\x9f\xce\xa3", 0, &n1); /* ΟΔΟΣ */
    c2 = tokenize(t, "\xce\xbf\xce\xb4\xce\xbf\xcf\x83", 0, &n2); /* οδοσ */
    assert_int_equal(n1, n2);
    assert_memory_equal(c1, c2, n1 * sizeof *c1);
    free(c1);
    free(c2);
    /* digits one by one; contractions */
    const int32_t d[3] = {vid(t, "1</w>"), vid(t, "2</w>"), vid(t, "3</w>")};
    expect_tokens(t, "123", 0, d, 3);
    const int32_t ct[2] = {vid(t, "it</w>"), vid(t, "'s</w>")};
    expect_tokens(t, "IT'S", 0, ct, 2);
    /* bytes outside ASCII go through the byte map: U+00E9 is bytes C3 A9 -> symbols "Ã" "©</w>" */
    const int32_t e9[1] = {vid(t, "\xc3\x83\xc2\xa9</w>")};
    expect_tokens(t, "\xc3\xa9", 0, e9, 1);
    /* control characters are kept as symbols (no ftfy) */
    const int32_t nul[1] = {vid(t, "\xc4\x80</w>")}; /* byte 0x00 -> U+0100 */
    int32_t *z = NULL;
    rb_error e;
    TU_OK(rb_clip_tokenize(t, "\0", 1, 0, &z, &n, &e));
    assert_int_equal(n, 1);
    assert_int_equal(z[0], nul[0]);
    free(z);
    /* empty and whitespace-only prompts */
    int32_t ids[RB_CLIP_CONTEXT];
    size_t nu = 0;
    TU_OK(rb_clip_encode(t, "", 0, 0, ids, &nu, &e));
    assert_int_equal(nu, 2);
    assert_int_equal(ids[0], BOS);
    for (int i = 1; i < RB_CLIP_CONTEXT; i++) assert_int_equal(ids[i], EOS);
    TU_OK(rb_clip_encode(t, " \n\t ", 4, 0, ids, &nu, &e));
    assert_int_equal(nu, 2);
    TU_OK(rb_clip_encode(t, NULL, 0, 0, ids, &nu, &e));
    assert_int_equal(nu, 2);
    /* truncation: 100 words -> BOS + 75 + EOS, untruncated 102 */
    char big[400] = "";
    for (int i = 0; i < 100; i++) strcat(big, "a ");
    TU_OK(rb_clip_encode(t, big, strlen(big), 0, ids, &nu, &e));
    assert_int_equal(nu, 102);
    assert_int_equal(ids[0], BOS);
    for (int i = 1; i <= 75; i++) assert_int_equal(ids[i], a);
    assert_int_equal(ids[76], EOS);
    rb_clip_tokenizer_free(t);
}

/* ---- transformers-generated references (gen_clip_refs.py) ---- */

static void test_transformers_refs(void **s) {
    (void)s;
    char path[4096];
    const char *dir = getenv("RBEE_TEST_DATA_DIR");
    snprintf(path, sizeof path, "%s/tokenizer/clip/clip_refs.json", dir && *dir ? dir : RBEE_TEST_DATA_DIR);
    struct stat stt;
    if (stat(path, &stt) != 0) {
        fprintf(stderr, "SKIP: %s is absent; run tests/tokenizer/gen_clip_refs.py with transformers to create it\n",
                path);
        skip();
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 200);
    static const char *const confs[2] = {"pad_eot", "pad_excl"};
    rb_clip_tokenizer *t[2] = {load_dir("diffusers/pipelines/sd15/tokenizer"),
                               load_dir("diffusers/pipelines/sd21v/tokenizer")};
    size_t bad = 0, total = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        json_t *ptext = json_object_get(c, "prompt");
        const char *text = json_string_value(ptext);
        size_t len = json_string_length(ptext);
        assert_non_null(text);
        for (int k = 0; k < 2; k++) {
            json_t *fast = json_object_get(json_object_get(c, confs[k]), "fast");
            if (!fast) fail_msg("case %zu: no %s.fast", i, confs[k]);
            int32_t ids[RB_CLIP_CONTEXT], *raw = NULL;
            size_t nu = 0, n_raw = 0;
            rb_error e;
            TU_OK(rb_clip_encode(t[k], text, len, 0, ids, &nu, &e));
            TU_OK(rb_clip_tokenize(t[k], text, len, 0, &raw, &n_raw, &e));
            total++;
            bool ok = ids_equal(confs[k], text, ids, RB_CLIP_CONTEXT, json_object_get(fast, "input_ids"));
            ok = ids_equal("raw", text, raw, n_raw, json_object_get(fast, "raw_ids")) && ok;
            ok = nu == json_array_size(json_object_get(fast, "untruncated_ids")) && ok;
            if (!ok) bad++;
            free(raw);
        }
    }
    if (bad) fail_msg("%zu of %zu prompt/tokenizer pairs differ from transformers", bad, total);
    rb_clip_tokenizer_free(t[0]);
    rb_clip_tokenizer_free(t[1]);
    json_decref(root);
}

/* ---- A1111 emphasis (its doctests) ---- */

typedef struct {
    const char *text;
    double w;
} seg_want;

static void expect_segments(const char *prompt, const seg_want *want, size_t n_want) {
    rb_clip_segment *segs = NULL;
    size_t n = 0;
    rb_error e;
    TU_OK(rb_clip_parse_emphasis(prompt, strlen(prompt), &segs, &n, &e));
    bool ok = n == n_want;
    for (size_t i = 0; ok && i < n; i++)
        ok = strcmp(segs[i].text, want[i].text) == 0 && segs[i].len == strlen(want[i].text) && segs[i].weight == want[i].w;
    if (!ok) {
        fprintf(stderr, "emphasis of \"%s\":", prompt);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " ['%s', %.17g]", segs[i].text, segs[i].weight);
        fprintf(stderr, "\n");
    }
    rb_clip_segments_free(segs, n);
    assert_true(ok);
}

static void test_emphasis(void **s) {
    (void)s;
    const seg_want w1[] = {{"normal text", 1.0}};
    expect_segments("normal text", w1, 1);
    const seg_want w2[] = {{"an ", 1.0}, {"important", 1.1}, {" word", 1.0}};
    expect_segments("an (important) word", w2, 3);
    const seg_want w3[] = {{"unbalanced", 1.1}};
    expect_segments("(unbalanced", w3, 1);
    const seg_want w4[] = {{"(literal]", 1.0}};
    expect_segments("\\(literal\\]", w4, 1);
    const seg_want w5[] = {{"unnecessaryparens", 1.1}};
    expect_segments("(unnecessary)(parens)", w5, 1);
    const seg_want w6[] = {{"a ", 1.0},   {"house", 1.5730000000000004}, {" ", 1.1},
                           {"on", 1.0},   {" a ", 1.1},                  {"hill", 0.55},
                           {", sun, ", 1.1}, {"sky", 1.4641000000000006}, {".", 1.1}};
    expect_segments("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).", w6, 9);
    /* rules beyond the doctests */
    const seg_want w7[] = {{"a", 1.0}, {"BREAK", -1.0}, {"b", 1.0}};
    expect_segments("a BREAK b", w7, 3);
    const seg_want w8[] = {{"aBREAKb c", 1.0}};
    expect_segments("aBREAKb c", w8, 1);
    const seg_want w9[] = {{"a ", 1.5}};
    expect_segments("(a : 1.5 )", w9, 1);
    const seg_want w10[] = {{"a:b :1.2) ]", 1.0}};
    expect_segments("a:b :1.2) ]", w10, 1);
    const seg_want w11[] = {{"x", 1.0 / 1.1}};
    expect_segments("[x", w11, 1);
    const seg_want w12[] = {{"", 1.0}};
    expect_segments("", w12, 1);
    expect_segments("()", w12, 1);
    const seg_want w13[] = {{"a\\b", 1.0}};
    expect_segments("a\\\\b", w13, 1);
    /* a BREAK inside brackets is weighted, so it is no longer a BREAK */
    const seg_want w14[] = {{"a", 1.1}, {"BREAK", -1.1}, {"b", 1.1}};
    expect_segments("(a BREAK b)", w14, 3);
    rb_clip_segment *segs = NULL;
    size_t n = 0;
    rb_error e;
    assert_int_equal(rb_clip_parse_emphasis("(a:1.2.3)", 9, &segs, &n, &e), RB_E_INVALID);
    assert_null(segs);
    assert_int_equal(rb_clip_parse_emphasis("(a:.)", 5, &segs, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_clip_parse_emphasis("(\xff)", 3, &segs, &n, &e), RB_E_INVALID);
}

/* ---- A1111 chunks, laid out by hand ---- */

static rb_clip_chunks chunk(const rb_clip_tokenizer *t, const char *p, int backtrack, bool emphasis) {
    rb_clip_chunk_opts o;
    rb_clip_chunk_opts_default(&o);
    o.comma_backtrack = backtrack;
    o.emphasis = emphasis;
    rb_clip_chunks c;
    rb_error e;
    rb_status st = rb_clip_chunk_prompt(t, p, strlen(p), &o, &c, &e);
    if (st) fail_msg("chunk: %s", e.msg);
    return c;
}

/* Expects row r to be BOS, body[0..n), then EOS and pad. */
static void expect_row(const rb_clip_chunks *c, size_t r, const int32_t *body, size_t n, int32_t pad) {
    assert_true(r < c->n);
    assert_int_equal(c->ids[r][0], BOS);
    for (size_t i = 0; i < n; i++) assert_int_equal(c->ids[r][1 + i], body[i]);
    assert_int_equal(c->ids[r][1 + n], EOS);
    for (size_t i = 2 + n; i < RB_CLIP_CONTEXT; i++) assert_int_equal(c->ids[r][i], i == 76 && n == 75 ? EOS : pad);
}

static void test_chunks(void **s) {
    (void)s;
    rb_clip_tokenizer *t = load_dir("diffusers/pipelines/sd15/tokenizer");
    int32_t A = vid(t, "a</w>"), B = vid(t, "b</w>"), C = vid(t, ",</w>");
    int32_t body[80];
    char p[1024];
    /* 80 tokens: 75 + 5 */
    p[0] = '\0';
    for (int i = 0; i < 80; i++) strcat(p, "a ");
    rb_clip_chunks c = chunk(t, p, 20, true);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.token_count, 80);
    for (int i = 0; i < 80; i++) body[i] = A;
    expect_row(&c, 0, body, 75, EOS);
    expect_row(&c, 1, body, 5, EOS);
    for (int i = 0; i < RB_CLIP_CONTEXT; i++) assert_true(c.weights[0][i] == 1.0f && c.weights[1][i] == 1.0f);
    rb_clip_chunks_free(&c);
    assert_null(c.ids);
    /* comma 5 tokens before the end: the tail moves to the next row */
    p[0] = '\0';
    for (int i = 0; i < 70; i++) strcat(p, "a ");
    strcat(p, ", ");
    for (int i = 0; i < 10; i++) strcat(p, "b ");
    c = chunk(t, p, 20, true);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.token_count, 85);
    for (int i = 0; i < 70; i++) body[i] = A;
    body[70] = C;
    expect_row(&c, 0, body, 71, EOS);
    for (int i = 0; i < 10; i++) body[i] = B;
    expect_row(&c, 1, body, 10, EOS);
    rb_clip_chunks_free(&c);
    /* backtrack off, or shorter than the distance: plain 75-token cut */
    for (int bt = 0; bt <= 4; bt += 4) {
        c = chunk(t, p, bt, true);
        assert_int_equal(c.n, 2);
        assert_int_equal(c.token_count, 81);
        for (int i = 0; i < 70; i++) body[i] = A;
        body[70] = C;
        for (int i = 71; i < 75; i++) body[i] = B;
        expect_row(&c, 0, body, 75, EOS);
        for (int i = 0; i < 6; i++) body[i] = B;
        expect_row(&c, 1, body, 6, EOS);
        rb_clip_chunks_free(&c);
    }
    /* exactly 75 tokens: one row; 76: two */
    p[0] = '\0';
    for (int i = 0; i < 75; i++) strcat(p, "a ");
    c = chunk(t, p, 20, true);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.token_count, 75);
    rb_clip_chunks_free(&c);
    strcat(p, "b");
    c = chunk(t, p, 20, true);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.token_count, 76);
    expect_row(&c, 1, (const int32_t[]){B}, 1, EOS);
    rb_clip_chunks_free(&c);
    /* BREAK starts a row; with emphasis off it is a word */
    c = chunk(t, "a BREAK b", 20, true);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.token_count, 76);
    expect_row(&c, 0, (const int32_t[]){A}, 1, EOS);
    expect_row(&c, 1, (const int32_t[]){B}, 1, EOS);
    rb_clip_chunks_free(&c);
    c = chunk(t, "a BREAK b", 20, false);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.token_count, 3);
    expect_row(&c, 0, (const int32_t[]){A, vid(t, "break</w>"), B}, 3, EOS);
    rb_clip_chunks_free(&c);
    /* empty prompt: one empty row */
    c = chunk(t, "", 20, true);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.token_count, 0);
    expect_row(&c, 0, NULL, 0, EOS);
    rb_clip_chunks_free(&c);
    /* weights per token */
    c = chunk(t, "(a) [b] (a:1.5) b", 20, true);
    assert_int_equal(c.n, 1);
    expect_row(&c, 0, (const int32_t[]){A, B, A, B}, 4, EOS);
    const float w[6] = {1.0f, (float)1.1, (float)(1.0 / 1.1), 1.5f, 1.0f, 1.0f};
    assert_memory_equal(c.weights[0], w, sizeof w);
    rb_clip_chunks_free(&c);
    rb_clip_tokenizer_free(t);
    /* SD 2.x pad: EOS then 0 */
    t = load_dir("diffusers/pipelines/sd21v/tokenizer");
    c = chunk(t, "a", 20, true);
    expect_row(&c, 0, (const int32_t[]){A}, 1, 0);
    rb_clip_chunks_free(&c);
    /* a typed <|endoftext|> is the row's first EOS: A1111 pads right after it */
    c = chunk(t, "a <|endoftext|> a", 20, true);
    assert_int_equal(c.ids[0][1], A);
    assert_int_equal(c.ids[0][2], EOS);
    for (int i = 3; i < RB_CLIP_CONTEXT; i++) assert_int_equal(c.ids[0][i], 0);
    rb_clip_chunks_free(&c);
    /* bad input */
    rb_clip_chunk_opts o;
    rb_clip_chunk_opts_default(&o);
    rb_error e;
    assert_int_equal(rb_clip_chunk_prompt(t, "a\xc0", 2, &o, &c, &e), RB_E_INVALID);
    assert_null(c.ids);
    o.comma_backtrack = -1;
    assert_int_equal(rb_clip_chunk_prompt(t, "a", 1, &o, &c, &e), RB_E_RANGE);
    assert_int_equal(rb_clip_chunk_prompt(NULL, "a", 1, NULL, &c, &e), RB_E_INVALID);
    rb_clip_tokenizer_free(t);
}

/* ---- bad input ---- */

static char *read_all(const char *path, size_t *n) { return tu_read_file(path, n); }

static rb_status load_mem(const char *vocab, const char *merges, const char *conf, rb_error *e) {
    rb_clip_tokenizer *t = NULL;
    rb_status st = rb_clip_tokenizer_from_hf_memory(vocab, strlen(vocab), merges, strlen(merges), conf,
                                                    conf ? strlen(conf) : 0, &t, e);
    if (st == RB_OK) assert_non_null(t);
    else assert_null(t);
    rb_clip_tokenizer_free(t);
    return st;
}

static void test_bad_input(void **s) {
    (void)s;
    rb_error e;
    rb_clip_tokenizer *t = load_dir("diffusers/pipelines/sd15/tokenizer");
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    /* invalid UTF-8 in the prompt */
    static const char *const bad[] = {"a\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "ok\xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rb_clip_tokenize(t, bad[i], strlen(bad[i]), 0, &ids, &n, &e), RB_E_INVALID);
        assert_null(ids);
        assert_int_equal(n, 0);
        assert_non_null(strstr(e.msg, "UTF-8"));
        int32_t row[RB_CLIP_CONTEXT];
        assert_int_equal(rb_clip_encode(t, bad[i], strlen(bad[i]), 0, row, NULL, &e), RB_E_INVALID);
    }
    assert_int_equal(rb_clip_tokenize(t, NULL, 3, 0, &ids, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_clip_tokenize(NULL, "a", 1, 0, &ids, &n, &e), RB_E_INVALID);
    assert_int_equal(rb_clip_encode(t, "a", 1, 0, NULL, NULL, &e), RB_E_INVALID);
    rb_clip_tokenizer_free(t);

    /* a small valid vocabulary, then broken variants */
    const char *v = "{\"a\": 0, \"b\": 1, \"a</w>\": 2, \"b</w>\": 3, \"ab</w>\": 4, \"<|startoftext|>\": 5, "
                    "\"<|endoftext|>\": 6}";
    const char *m = "#version: 0.2\na b</w>\n";
    assert_int_equal(load_mem(v, m, NULL, &e), RB_OK);
    rb_clip_tokenizer *small = NULL;
    TU_OK(rb_clip_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), NULL, 0, &small, &e));
    const int32_t ab[1] = {4};
    expect_tokens(small, "AB", 0, ab, 1);
    const int32_t unk[2] = {6, 6}; /* bytes without symbols become unk (= eos text) */
    expect_tokens(small, "zz", 0, unk, 2);
    rb_clip_tokenizer_free(small);
    assert_int_equal(load_mem("{\"a\": 0, ", m, NULL, &e), RB_E_FORMAT);         /* truncated JSON */
    assert_int_equal(load_mem("[1, 2]", m, NULL, &e), RB_E_FORMAT);              /* not an object */
    assert_int_equal(load_mem("{\"a\": -1}", m, NULL, &e), RB_E_FORMAT);         /* negative id */
    assert_int_equal(load_mem("{\"a\": \"x\"}", m, NULL, &e), RB_E_FORMAT);      /* id not a number */
    assert_int_equal(load_mem("{\"a\": 0, \"b\": 0}", m, NULL, &e), RB_E_FORMAT); /* id used twice */
    assert_int_equal(load_mem(v, "#version: 0.2\na c</w>\n", NULL, &e), RB_E_FORMAT);
    assert_non_null(strstr(e.msg, "line 2"));
    assert_int_equal(load_mem(v, "#version: 0.2\nab</w>\n", NULL, &e), RB_E_FORMAT);  /* one symbol */
    assert_int_equal(load_mem(v, "#version: 0.2\na  b</w>\n", NULL, &e), RB_E_FORMAT); /* two spaces */
    assert_int_equal(load_mem(v, "#version: 0.2\na b\n", NULL, &e), RB_E_FORMAT);     /* result "ab" absent */
    assert_int_equal(load_mem(v, "#version: 0.2\n\na b</w>\n", NULL, &e), RB_E_FORMAT); /* empty line */
    assert_int_equal(load_mem(v, "#version: 0.2\n", NULL, &e), RB_E_FORMAT);           /* no merges */
    assert_int_equal(load_mem(v, "a b</w>\xff\n", NULL, &e), RB_E_FORMAT);             /* not UTF-8 */
    assert_int_equal(load_mem(v, m, "{\"pad_token\": \"!\"}", &e), RB_E_FORMAT);       /* pad not in vocab */
    assert_int_equal(load_mem(v, m, "{\"pad_token\": {\"content\": \"a\"}}", &e), RB_OK);
    assert_int_equal(load_mem(v, m, "{\"pad_token\": 3}", &e), RB_E_FORMAT);
    assert_int_equal(load_mem(v, m, "{\"model_max_length\": 1000}", &e), RB_E_UNSUPPORTED);
    assert_int_equal(load_mem(v, m, "{\"model_max_length\": 77}", &e), RB_OK);
    assert_int_equal(load_mem(v, m, "{\"added_tokens_decoder\": {\"9\": {\"content\": \"x\"}}}", &e),
                     RB_E_UNSUPPORTED);
    assert_int_equal(load_mem(v, m, "{\"added_tokens_decoder\": {\"x\": {\"content\": \"x\"}}}", &e), RB_E_FORMAT);
    assert_int_equal(load_mem(v, m, "not json", &e), RB_E_FORMAT);
    /* an added token from the config is matched verbatim */
    const char *conf = "{\"added_tokens_decoder\": {\"4\": {\"content\": \"<x>\", \"special\": true}}}";
    TU_OK(rb_clip_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), conf, strlen(conf), &small, &e));
    const int32_t ax[3] = {2, 4, 3};
    expect_tokens(small, "a<x>b", 0, ax, 3);
    rb_clip_tokenizer_free(small);

    /* files: missing folder, truncated merges of the real vocabulary */
    assert_int_equal(rb_clip_tokenizer_load_dir("/nonexistent/clip", &t, &e), RB_E_IO);
    assert_null(t);
    size_t vl = 0, ml = 0;
    char *vj = read_all(fixture_dir("diffusers/pipelines/sd15/tokenizer/vocab.json"), &vl);
    char *mt = read_all(fixture_dir("diffusers/pipelines/sd15/tokenizer/merges.txt"), &ml);
    assert_int_equal(rb_clip_tokenizer_from_hf_memory(vj, vl / 2, mt, ml, NULL, 0, &t, &e), RB_E_FORMAT);
    size_t cut = ml / 2; /* mid-line cut: the last line has one symbol or a partial one */
    while (mt[cut] != ' ') cut++;
    assert_int_equal(rb_clip_tokenizer_from_hf_memory(vj, vl, mt, cut, NULL, 0, &t, &e), RB_E_FORMAT);
    TU_OK(rb_clip_tokenizer_from_hf_memory(vj, vl, mt, ml, NULL, 0, &t, &e));
    rb_clip_tokenizer_free(t);

    /* the .txt.gz: missing, truncated, corrupted, too few lines */
    char dir[64], path[128];
    assert_int_equal(tu_tmpdir_make(dir, sizeof dir, "clipgz"), 0);
    assert_int_equal(rb_clip_tokenizer_load_bpe_gz("/nonexistent.txt.gz", NULL, &t, &e), RB_E_IO);
    char src[4096];
    snprintf(src, sizeof src, "%s/models/clip/bpe_simple_vocab_16e6.txt.gz", RBEE_SOURCE_DIR);
    size_t gl = 0;
    char *gz = read_all(src, &gl);
    snprintf(path, sizeof path, "%s/trunc.gz", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(gz, 1, gl / 3, f);
    fclose(f);
    assert_int_equal(rb_clip_tokenizer_load_bpe_gz(path, NULL, &t, &e), RB_E_FORMAT);
    assert_null(t);
    for (size_t i = gl / 2; i < gl / 2 + 64; i++) gz[i] ^= 0x5A;
    snprintf(path, sizeof path, "%s/corrupt.gz", dir);
    f = fopen(path, "wb");
    fwrite(gz, 1, gl, f);
    fclose(f);
    assert_int_equal(rb_clip_tokenizer_load_bpe_gz(path, NULL, &t, &e), RB_E_FORMAT);
    snprintf(path, sizeof path, "%s/short.txt", dir); /* plain text (zlib reads it as is), too few merges */
    f = fopen(path, "wb");
    fputs("header\ni n\nt h\n", f);
    fclose(f);
    assert_int_equal(rb_clip_tokenizer_load_bpe_gz(path, NULL, &t, &e), RB_E_FORMAT);
    assert_non_null(strstr(e.msg, "merge lines"));
    free(gz);
    assert_int_equal(tu_tmpdir_remove(dir), 0);

    /* in-memory lists: duplicates, NULLs, sizes */
    const char *toks[] = {"a", "b", "a</w>", "b</w>", "ab</w>", "<|startoftext|>", "<|endoftext|>"};
    const char *merges[] = {"a b</w>"};
    TU_OK(rb_clip_tokenizer_from_lists(toks, NULL, 7, merges, 1, NULL, &t, &e));
    expect_tokens(t, "ab", 0, ab, 1);
    rb_clip_tokenizer_free(t);
    const char *dup[] = {"a", "a"};
    assert_int_equal(rb_clip_tokenizer_from_lists(dup, NULL, 2, merges, 1, NULL, &t, &e), RB_E_FORMAT);
    assert_int_equal(rb_clip_tokenizer_from_lists(toks, NULL, 0, merges, 1, NULL, &t, &e), RB_E_FORMAT);
    assert_int_equal(rb_clip_tokenizer_from_lists(toks, NULL, 5, merges, 1, NULL, &t, &e), RB_E_FORMAT); /* no bos */
    assert_int_equal(rb_clip_tokenizer_from_lists(NULL, NULL, 5, merges, 1, NULL, &t, &e), RB_E_INVALID);
    const char *bad_merge[] = {"a"};
    assert_int_equal(rb_clip_tokenizer_from_lists(toks, NULL, 7, bad_merge, 1, NULL, &t, &e), RB_E_FORMAT);
    free(vj);
    free(mt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_sd15),
        cmocka_unit_test(test_fixture_sd21v),
        cmocka_unit_test(test_fixture_sdxl),
        cmocka_unit_test(test_fixture_sd15_inpaint),
        cmocka_unit_test(test_gz_matches_vocab_json),
        cmocka_unit_test(test_bpe_against_naive),
        cmocka_unit_test(test_pad_exclamation_quirk),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_transformers_refs),
        cmocka_unit_test(test_emphasis),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
