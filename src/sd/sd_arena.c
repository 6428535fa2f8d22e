/* The measured activation arena of the Stable Diffusion networks (see
 * sd_arena.h): slot and stack allocation, the two passes, op failures. */
#include "sd/sd_arena.h"

#include <stdio.h>
#include <string.h>

#define SD_ALIGN 64

static size_t align_up(size_t n) { return (n + SD_ALIGN - 1) & ~(size_t)(SD_ALIGN - 1); }

static rb_tensor make(sd_run *r, rb_dtype dt, size_t off, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    rb_tensor t;
    memset(&t, 0, sizeof t);
    rb_tensor_init4(&t, dt, ne0, ne1, ne2, ne3, r->measure ? NULL : r->buf, off);
    return t;
}

static size_t nbytes(rb_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return rb_dtype_row_size(dt, 1) * (size_t)ne0 * (size_t)ne1 * (size_t)ne2 * (size_t)ne3;
}

static rb_tensor stack_alloc(sd_run *r, rb_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const size_t n = align_up(nbytes(dt, ne0, ne1, ne2, ne3));
    rb_tensor t = make(r, dt, r->base + r->top, ne0, ne1, ne2, ne3);
    r->top += n;
    if (r->top > r->peak) {
        if (!r->measure && r->st == RB_OK) r->st = RB_E_RANGE; /* the real pass outgrew the measured one */
        r->peak = r->top;
    }
    return t;
}

rb_tensor sd_stack(sd_run *r, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return stack_alloc(r, r->act, ne0, ne1, ne2, ne3);
}

rb_tensor sd_stack_f32(sd_run *r, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return stack_alloc(r, RB_F32, ne0, ne1, ne2, ne3);
}

rb_tensor sd_stack_i32(sd_run *r, int64_t ne0, int64_t ne1) { return stack_alloc(r, RB_I32, ne0, ne1, 1, 1); }

rb_tensor sd_slot(sd_run *r, int k, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const size_t n = align_up(nbytes(r->act, ne0, ne1, ne2, ne3));
    if (n > r->slot_size[k]) {
        if (!r->measure && r->st == RB_OK) r->st = RB_E_RANGE;
        r->slot_size[k] = n;
    }
    return make(r, r->act, r->slot_off[k], ne0, ne1, ne2, ne3);
}

rb_status sd_upload(sd_run *r, rb_tensor *t, const void *data, size_t n) {
    if (r->measure) return RB_OK;
    rb_status s = rb_tensor_set(t, data, n);
    if (s != RB_OK) return rb_error_set(r->err, s, "cannot upload %zu bytes: %s", n, rb_backend_last_error(r->be));
    return RB_OK;
}

rb_status sd_op_fail(sd_run *r, rb_status s, const char *func, const char *expr) {
    return rb_error_set(r->err, s, "%s: %s: %s", func, expr, rb_backend_last_error(r->be));
}

void sd_scratch_free(sd_scratch *sc) {
    if (!sc) return;
    rb_buffer_free(sc->buf); /* act stays: the network's setting */
    sc->buf = NULL;
    sc->size = 0;
}

static rb_status measure(rb_backend *be, rb_dtype act, sd_run *r, sd_pass_fn fn, void *ctx, size_t *total,
                         rb_error *err) {
    memset(r, 0, sizeof *r);
    r->be = be;
    r->act = act;
    r->err = err;
    r->measure = true;
    SD_TRY(fn(r, ctx));
    size_t off = 0;
    for (int k = 0; k < SD_SLOTS; k++) {
        r->slot_off[k] = off;
        off += r->slot_size[k];
    }
    r->base = off;
    *total = off + r->peak;
    return RB_OK;
}

rb_status sd_run_measure(rb_backend *be, const sd_scratch *sc, sd_pass_fn fn, void *ctx, size_t *bytes,
                         rb_error *err) {
    sd_run r;
    return measure(be, sc->act, &r, fn, ctx, bytes, err);
}

rb_status sd_run_passes(rb_backend *be, sd_scratch *sc, sd_pass_fn fn, void *ctx, rb_error *err) {
    sd_run r;
    size_t total = 0;
    SD_TRY(measure(be, sc->act, &r, fn, ctx, &total, err));
    if (total == 0) total = SD_ALIGN;
    if (!sc->buf || sc->size < total) {
        sd_scratch_free(sc);
        rb_status s = rb_buffer_alloc(be, total, &sc->buf);
        if (s != RB_OK)
            return rb_error_set(err, s, "cannot allocate %.1f MiB of activations: %s", (double)total / 1048576.0,
                                rb_backend_last_error(be));
        sc->size = total;
    }
    r.measure = false;
    r.buf = sc->buf;
    r.top = 0;
    r.peak = total - r.base;
    rb_status s = fn(&r, ctx);
    if (s == RB_OK && r.st != RB_OK)
        return rb_error_set(err, RB_E_RANGE, "internal: the forward pass used more memory than measured");
    return s;
}

rb_tensor sd_slice(const rb_tensor *t, int dim, int64_t start, int64_t len) {
    rb_tensor v = *t;
    v.offs += (size_t)start * t->nb[dim];
    v.ne[dim] = len;
    return v;
}

rb_tensor sd_reshape(const rb_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    rb_tensor v = *t;
    const size_t es = rb_dtype_row_size(t->dtype, 1);
    v.ne[0] = ne0;
    v.ne[1] = ne1;
    v.ne[2] = ne2;
    v.ne[3] = ne3;
    v.nb[0] = es;
    v.nb[1] = es * (size_t)ne0;
    v.nb[2] = v.nb[1] * (size_t)ne1;
    v.nb[3] = v.nb[2] * (size_t)ne2;
    return v;
}

rb_tensor sd_permute(const rb_tensor *t, int p0, int p1, int p2, int p3) {
    rb_tensor v = *t;
    const int p[4] = {p0, p1, p2, p3};
    for (int i = 0; i < 4; i++) {
        v.ne[i] = t->ne[p[i]];
        v.nb[i] = t->nb[p[i]];
    }
    return v;
}
