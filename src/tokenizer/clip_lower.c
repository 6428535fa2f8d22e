/* Per-character Unicode lowercasing for the CLIP tokenizer, as HF
 * tokenizers' Lowercase normalizer does it (Rust char::to_lowercase: full
 * mappings, so U+0130 becomes "i" + U+0307, and no context rules, so capital
 * sigma is always U+03C3). Table: clip_lower_data.h (gen_clip_lower.py). */
#include "tokenizer/clip_internal.h"
#include "tokenizer/clip_lower_data.h"
#include "tokenizer/tok_utf8.h"

#define N_RUNS (sizeof clip_lower_runs / sizeof clip_lower_runs[0])
#define N_MULTI (sizeof clip_lower_multi / sizeof clip_lower_multi[0])

size_t clip_lower_cp(uint32_t cp, uint32_t out[2]) {
    out[0] = cp;
    if (cp < 0x80) {
        if (cp >= 'A' && cp <= 'Z') out[0] = cp + 32;
        return 1;
    }
    for (size_t i = 0; i < N_MULTI; i++) {
        if (clip_lower_multi[i][0] == cp) {
            out[0] = clip_lower_multi[i][1];
            out[1] = clip_lower_multi[i][2];
            return 2;
        }
    }
    size_t lo = 0, hi = N_RUNS;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (cp < clip_lower_runs[m][0]) hi = m;
        else if (cp > clip_lower_runs[m][1]) lo = m + 1;
        else {
            if ((cp - clip_lower_runs[m][0]) % clip_lower_runs[m][2] == 0)
                out[0] = cp + clip_lower_runs[m][3]; /* unsigned wrap-around adds a negative delta */
            break;
        }
    }
    return 1;
}

rb_status clip_lower(const char *s, size_t len, tok_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    rb_status st = tok_buf_reserve(out, len + 1);
    for (size_t i = 0; i < len && !st;) {
        if (u[i] < 0x80) {
            char c = (char)(u[i] >= 'A' && u[i] <= 'Z' ? u[i] + 32 : u[i]);
            st = tok_buf_putc(out, c);
            i++;
            continue;
        }
        uint32_t cp, low[2];
        i += tok_utf8_decode(u + i, &cp);
        size_t k = clip_lower_cp(cp, low);
        for (size_t j = 0; j < k && !st; j++) {
            char enc[4];
            size_t n = tok_utf8_encode(low[j], enc);
            st = tok_buf_append(out, enc, n);
        }
    }
    return st;
}
