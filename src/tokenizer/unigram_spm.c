/* Loading a sentencepiece model file (spiece.model): the ModelProto
 * protobuf read by hand, only the fields the Unigram encoder needs, with
 * every length and field checked (the file is external input):
 *
 *   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
 *   SentencePiece   1 piece (string), 2 score (float), 3 type (enum, default NORMAL)
 *   TrainerSpec     3 model_type (1 = UNIGRAM), 35 byte_fallback,
 *                   40 unk_id (default 0), 41 bos_id, 42 eos_id (default 2), 43 pad_id (default -1)
 *   NormalizerSpec  2 precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
 *                   5 escape_whitespaces (all default true)
 *
 * Other fields are skipped by wire type; groups (wire types 3, 4) are
 * rejected. */
#include "tokenizer/unigram_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rb_status ug_read_file(const char *path, char **data, size_t *len, rb_error *err) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s", path);
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || sz > (1L << 30) || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return rb_error_set(err, RB_E_IO, "cannot size %s", path);
    }
    char *p = malloc((size_t)sz + 1);
    if (!p) {
        fclose(f);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    if (fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        free(p);
        return rb_error_set(err, RB_E_IO, "cannot read %s", path);
    }
    fclose(f);
    p[sz] = 0;
    *data = p;
    *len = (size_t)sz;
    return RB_OK;
}

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *b, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return false;
        const uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* One field: its number, wire type, and for wire type 2 the payload; the
 * varint value for type 0, the 4 bytes for type 5. */
typedef struct pb_field {
    uint32_t num;
    int wt;
    uint64_t v;
    const uint8_t *data;
    size_t len;
} pb_field;

static bool pb_next(pb *b, pb_field *f) {
    uint64_t key;
    if (!pb_varint(b, &key) || key >> 3 == 0 || key >> 3 > 0x1FFFFFFF) return false;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    switch (f->wt) {
    case 0:
        return pb_varint(b, &f->v);
    case 1:
        if (b->end - b->p < 8) return false;
        b->p += 8;
        return true;
    case 2: {
        uint64_t n;
        if (!pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) return false;
        f->data = b->p;
        f->len = (size_t)n;
        b->p += n;
        return true;
    }
    case 5:
        if (b->end - b->p < 4) return false;
        f->data = b->p;
        f->len = 4;
        f->v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 | (uint64_t)b->p[3] << 24;
        b->p += 4;
        return true;
    default:
        return false;
    }
}

typedef struct spm_spec {
    int64_t model_type, unk_id, eos_id, pad_id;
    bool byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
    const uint8_t *charsmap;
    size_t charsmap_len;
} spm_spec;

#define BAD(...) rb_error_set(err, RB_E_FORMAT, "spiece.model: " __VA_ARGS__)

static rb_status parse_trainer(const uint8_t *d, size_t n, spm_spec *sp, rb_error *err) {
    pb b = {d, d + n};
    pb_field f;
    while (b.p < b.end) {
        if (!pb_next(&b, &f)) return BAD("truncated or malformed trainer_spec");
        if (f.wt != 0) continue;
        const int64_t v = (int64_t)f.v;
        if (f.num == 3) sp->model_type = v;
        else if (f.num == 35) sp->byte_fallback = f.v != 0;
        else if (f.num == 40) sp->unk_id = (int32_t)v;
        else if (f.num == 42) sp->eos_id = (int32_t)v;
        else if (f.num == 43) sp->pad_id = (int32_t)v;
    }
    return RB_OK;
}

static rb_status parse_normalizer(const uint8_t *d, size_t n, spm_spec *sp, rb_error *err) {
    pb b = {d, d + n};
    pb_field f;
    while (b.p < b.end) {
        if (!pb_next(&b, &f)) return BAD("truncated or malformed normalizer_spec");
        if (f.num == 2 && f.wt == 2) {
            sp->charsmap = f.data;
            sp->charsmap_len = f.len;
        } else if (f.wt == 0 && f.num == 3) {
            sp->add_dummy_prefix = f.v != 0;
        } else if (f.wt == 0 && f.num == 4) {
            sp->remove_extra_ws = f.v != 0;
        } else if (f.wt == 0 && f.num == 5) {
            sp->escape_ws = f.v != 0;
        }
    }
    return RB_OK;
}

static rb_status parse_piece(rb_unigram *t, int32_t id, const uint8_t *d, size_t n, rb_error *err) {
    pb b = {d, d + n};
    pb_field f;
    const uint8_t *text = NULL;
    size_t tl = 0;
    float score = 0.0f;
    int64_t type = TOK_TYPE_NORMAL;
    while (b.p < b.end) {
        if (!pb_next(&b, &f)) return BAD("piece %d truncated or malformed", (int)id);
        if (f.num == 1 && f.wt == 2) {
            text = f.data;
            tl = f.len;
        } else if (f.num == 2 && f.wt == 5) {
            uint32_t u = (uint32_t)f.v;
            memcpy(&score, &u, 4);
        } else if (f.num == 3 && f.wt == 0) {
            type = (int64_t)f.v;
        }
    }
    if (!text || tl == 0) return BAD("piece %d has no text", (int)id);
    if (type < TOK_TYPE_NORMAL || type > TOK_TYPE_BYTE) return BAD("piece %d has type %lld", (int)id, (long long)type);
    if (score != score) return BAD("piece %d has a NaN score", (int)id);
    if (tok_vocab_set(&t->v, id, (const char *)text, tl) != RB_OK) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    t->v.scores[id] = score;
    t->v.types[id] = (int32_t)type;
    return RB_OK;
}

rb_status rb_unigram_from_spm_memory(const void *data, size_t len, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!data && len) return rb_error_set(err, RB_E_INVALID, "unigram: NULL data");
    const uint8_t *d = data;
    pb b = {d, d + len};
    pb_field f;
    spm_spec sp = {.model_type = 1, .unk_id = 0, .eos_id = 2, .pad_id = -1, .add_dummy_prefix = true,
                   .remove_extra_ws = true, .escape_ws = true};
    int64_t n_pieces = 0;
    const uint8_t *trainer = NULL, *normalizer = NULL;
    size_t trainer_len = 0, normalizer_len = 0;
    while (b.p < b.end) { /* first pass: count pieces, find the specs */
        if (!pb_next(&b, &f)) return BAD("truncated or malformed at byte %zu", (size_t)(b.p - d));
        if (f.num == 1 && f.wt == 2) n_pieces++;
        else if (f.num == 2 && f.wt == 2) trainer = f.data, trainer_len = f.len;
        else if (f.num == 3 && f.wt == 2) normalizer = f.data, normalizer_len = f.len;
    }
    if (n_pieces == 0) return BAD("no pieces");
    if (trainer) {
        rb_status st = parse_trainer(trainer, trainer_len, &sp, err);
        if (st != RB_OK) return st;
    }
    if (normalizer) {
        rb_status st = parse_normalizer(normalizer, normalizer_len, &sp, err);
        if (st != RB_OK) return st;
    }
    if (sp.model_type != 1)
        return rb_error_set(err, RB_E_UNSUPPORTED, "spiece.model: model_type %lld is not UNIGRAM (1)",
                            (long long)sp.model_type);
    if (n_pieces > (1 << 24)) return BAD("%lld pieces", (long long)n_pieces);
    rb_unigram *t;
    rb_status st = ug_new((int32_t)n_pieces, &t, err);
    if (st != RB_OK) return st;
    t->spm = true;
    b.p = d;
    int32_t id = 0;
    while (b.p < b.end && st == RB_OK) {
        pb_next(&b, &f); /* validated above */
        if (f.num == 1 && f.wt == 2) st = parse_piece(t, id++, f.data, f.len, err);
    }
    if (st == RB_OK && (sp.unk_id < 0 || sp.unk_id >= n_pieces))
        st = BAD("unk_id %lld outside the %lld pieces", (long long)sp.unk_id, (long long)n_pieces);
    if (st == RB_OK && (sp.eos_id >= n_pieces || sp.pad_id >= n_pieces))
        st = BAD("eos_id %lld / pad_id %lld outside the %lld pieces", (long long)sp.eos_id, (long long)sp.pad_id,
                 (long long)n_pieces);
    if (st == RB_OK && sp.charsmap_len) {
        st = ug_charsmap_parse(sp.charsmap, sp.charsmap_len, &t->cm, err);
        t->has_cm = st == RB_OK;
    }
    if (st != RB_OK) {
        rb_unigram_free(t);
        return st;
    }
    t->unk_id = (int32_t)sp.unk_id;
    t->eos_id = sp.eos_id >= 0 ? (int32_t)sp.eos_id : -1;
    t->pad_id = sp.pad_id >= 0 ? (int32_t)sp.pad_id : 0;
    t->byte_fallback = sp.byte_fallback;
    t->add_dummy_prefix = sp.add_dummy_prefix;
    t->remove_extra_ws = sp.remove_extra_ws;
    t->escape_ws = sp.escape_ws;
    ug_finish(t);
    *out = t;
    return RB_OK;
}

rb_status rb_unigram_load_spm(const char *path, rb_unigram **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "unigram: out is NULL");
    *out = NULL;
    if (!path) return rb_error_set(err, RB_E_INVALID, "unigram: NULL path");
    char *data;
    size_t len;
    rb_status st = ug_read_file(path, &data, &len, err);
    if (st != RB_OK) return st;
    st = rb_unigram_from_spm_memory(data, len, out, err);
    free(data);
    if (st != RB_OK && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        rb_error_set(err, st, "%s: %s", path, msg);
    }
    return st;
}
