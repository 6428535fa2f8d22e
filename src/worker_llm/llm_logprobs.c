/* Implementation of llm_logprobs.h. */
#include "worker_llm/llm_logprobs.h"
#include "worker/wk_util.h"

#include <math.h>
#include <stdlib.h>

double llm_logsumexp(const float *row, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (row[i] > mx) mx = row[i]; /* NaN compares false */
    if (mx == -INFINITY) return -INFINITY;
    if (mx == INFINITY) return INFINITY;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        if (row[i] > -INFINITY) sum += exp((double)row[i] - (double)mx);
    return (double)mx + log(sum);
}

/* a before b in the ranking: larger value, then lower id */
static bool before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

int llm_top_logprobs(const float *row, int64_t n, double lse, int k, llm_top_logprob *out) {
    int have = 0;
    float *vals = k > 0 ? malloc(sizeof(float) * (size_t)k) : NULL;
    if (k > 0 && !vals) return 0;
    for (int64_t i = 0; i < n && k > 0; i++) {
        const float v = row[i];
        if (isnan(v)) continue;
        if (have == k && !before(v, (int32_t)i, vals[k - 1], out[k - 1].id)) continue;
        int pos = have < k ? have++ : k - 1;
        while (pos > 0 && before(v, (int32_t)i, vals[pos - 1], out[pos - 1].id)) {
            vals[pos] = vals[pos - 1];
            out[pos] = out[pos - 1];
            pos--;
        }
        vals[pos] = v;
        out[pos].id = (int32_t)i;
    }
    for (int i = 0; i < have; i++) out[i].logprob = (double)vals[i] - lse;
    free(vals);
    return have;
}

static double reported(double lp) { return isfinite(lp) ? lp : LLM_LOGPROB_FLOOR; }

/* {"id", "token", "logprob", "bytes"} of one token. */
static json_t *token_object(const rb_tokenizer *tok, int32_t id, double logprob) {
    char *piece = NULL;
    size_t len = 0;
    /* an id past the tokenizer's vocabulary (a padded output head) has no text */
    rb_status s = rb_tokenizer_token_piece(tok, id, &piece, &len, NULL);
    if (s == RB_E_RANGE) len = 0;
    else if (s != RB_OK) return NULL;
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < len; i++)
        if (json_array_append_new(bytes, json_integer((unsigned char)piece[i])) != 0) {
            json_decref(bytes);
            bytes = NULL;
        }
    json_t *text = bytes ? wk_json_text(piece ? piece : "", len) : NULL;
    json_t *o = text ? json_pack("{s:i,s:o,s:f,s:o}", "id", (int)id, "token", text, "logprob", reported(logprob), "bytes",
                                 bytes)
                     : NULL;
    if (!text) json_decref(bytes);
    free(piece);
    return o;
}

json_t *llm_logprob_entry(const rb_tokenizer *tok, const float *row, int64_t n, int32_t chosen, int k) {
    if (chosen < 0 || chosen >= n) return NULL;
    const double lse = llm_logsumexp(row, n);
    json_t *e = token_object(tok, chosen, (double)row[chosen] - lse);
    json_t *top = json_array();
    if (!e || !top) {
        json_decref(e);
        json_decref(top);
        return NULL;
    }
    json_object_set_new(e, "top_logprobs", top);
    if (k <= 0) return e;
    llm_top_logprob *best = malloc(sizeof *best * (size_t)k);
    if (!best) {
        json_decref(e);
        return NULL;
    }
    const int m = llm_top_logprobs(row, n, lse, k > n ? (int)n : k, best);
    for (int i = 0; i < m; i++) {
        json_t *t = token_object(tok, best[i].id, best[i].logprob);
        if (!t || json_array_append_new(top, t) != 0) {
            json_decref(e);
            e = NULL;
            break;
        }
    }
    free(best);
    return e;
}
