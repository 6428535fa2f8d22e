/* libFuzzer target: the HF tokenizer.json loader (a model folder's untrusted
 * file) and encode/decode of a fuzzed string. Input = TOKENIZER_JSON
 * [NUL TEXT]. A tokenizer that loads encodes TEXT with and without special
 * tokens and with a plain range over its middle third, decodes the ids (with
 * and without special tokens), streams them back one by one (the pieces must
 * add up to the full decode), and decodes ids made from the text's bytes. A
 * breach of those properties aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rbee/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The pieces of a streamed decode must concatenate to rb_tokenizer_decode's text. */
static void stream_check(const rb_tokenizer *t, const int32_t *ids, size_t n, const char *full, size_t full_len) {
    rb_tokenizer_stream *s = NULL;
    if (rb_tokenizer_stream_create(t, 0, &s, NULL) != RB_OK) return;
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p = NULL;
        size_t len = 0;
        rb_status st = i < n ? rb_tokenizer_stream_push(s, ids[i], &p, &len, NULL)
                             : rb_tokenizer_stream_flush(s, &p, &len, NULL);
        if (st != RB_OK) break;
        if (at + len > full_len || (len && memcmp(full + at, p, len) != 0)) abort();
        at += len;
        if (i == n && at != full_len) abort();
    }
    rb_tokenizer_stream_free(s);
}

static void decode_all(const rb_tokenizer *t, const int32_t *ids, size_t n, bool stream) {
    for (unsigned flags = 0; flags <= RB_TOK_SKIP_SPECIAL; flags += RB_TOK_SKIP_SPECIAL) {
        char *text = NULL;
        size_t len = 0;
        if (rb_tokenizer_decode(t, ids, n, flags, &text, &len, NULL) == RB_OK) {
            if (!text || text[len] != '\0') abort();
            if (stream && flags == 0) stream_check(t, ids, n, text, len);
        }
        free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - jlen - 1 : 0;
    rb_tokenizer *t = NULL;
    if (rb_tokenizer_load_hf_memory((const char *)data, jlen, NULL, 0, &t, NULL) != RB_OK) return 0;
    static const unsigned flags[] = {0, RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL};
    for (size_t f = 0; f < 2; f++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (rb_tokenizer_encode(t, text, tlen, flags[f], &ids, &n, NULL) == RB_OK) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= rb_tokenizer_n_vocab(t)) abort();
            decode_all(t, ids, n, true);
        }
        free(ids);
    }
    if (tlen >= 3) {
        rb_text_range mid = {tlen / 3, 2 * tlen / 3};
        int32_t *ids = NULL;
        size_t n = 0;
        if (rb_tokenizer_encode_plain(t, text, tlen, RB_TOK_PARSE_SPECIAL, &mid, 1, &ids, &n, NULL) == RB_OK)
            decode_all(t, ids, n, false);
        free(ids);
    }
    /* arbitrary ids (some out of range) */
    size_t nid = tlen / 2 < 256 ? tlen / 2 : 256;
    int32_t *raw = malloc((nid + 1) * sizeof *raw);
    if (raw) {
        for (size_t i = 0; i < nid; i++)
            raw[i] = (int32_t)(((uint32_t)(uint8_t)text[2 * i] << 8 | (uint8_t)text[2 * i + 1]) %
                               (uint32_t)(rb_tokenizer_n_vocab(t) + 2)) - 1;
        decode_all(t, raw, nid, true);
        free(raw);
    }
    rb_tokenizer_free(t);
    return 0;
}
