/* Evaluator of the Jinja subset: walks the syntax tree with jinja2's scoping
 * (a fresh scope per loop iteration and macro call, 'if' adds none), its
 * Undefined rules (printing an undefined value gives "", using one errors),
 * Python arithmetic/comparison semantics, and the step/depth/output limits
 * that keep hostile templates bounded. */
#include "chat/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool jx_fail(jctx *cx, rb_status code, const char *fmt, ...) {
    if (cx->failed) return false;
    cx->failed = true;
    char msg[RB_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rb_error_set(cx->err, code, "chat template error at line %d: %s", cx->line, msg);
    cx->failcode = code;
    return false;
}

bool jx_oom(jctx *cx) {
    return jx_fail(cx, RB_E_NOMEM, "out of memory (render memory limit is %zu bytes)", cx->mem->cap);
}

bool jx_step(jctx *cx) {
    if (++cx->steps > cx->max_steps)
        return jx_fail(cx, RB_E_RANGE, "step limit of %llu exceeded", (unsigned long long)cx->max_steps);
    return true;
}

/* ---- frames ---- */

const jv *jframe_lookup(const jframe *f, const char *name, size_t len) {
    for (; f; f = f->parent) {
        const jvar *vars = f->vars ? f->vars : f->inl;
        for (size_t i = f->n; i-- > 0;)
            if (vars[i].len == len && memcmp(vars[i].name, name, len) == 0) return &vars[i].v;
    }
    return NULL;
}

bool jframe_set(jctx *cx, jframe *f, const char *name, size_t len, jv v) {
    jvar *vars = f->vars ? f->vars : f->inl;
    for (size_t i = 0; i < f->n; i++) {
        if (vars[i].len == len && memcmp(vars[i].name, name, len) == 0) {
            vars[i].v = v;
            return true;
        }
    }
    size_t cap = f->vars ? f->cap : sizeof(f->inl) / sizeof(f->inl[0]);
    if (f->n == cap) {
        size_t nc = cap * 2;
        jvar *nv = jmem_alloc(cx->mem, nc * sizeof(jvar));
        if (!nv) return jx_oom(cx);
        memcpy(nv, vars, f->n * sizeof(jvar));
        f->vars = nv;
        f->cap = nc;
        vars = nv;
    }
    vars[f->n].name = name;
    vars[f->n].len = len;
    vars[f->n].v = v;
    f->n++;
    return true;
}

/* ---- helpers ---- */

static bool undefined_error(jctx *cx, jv u) {
    if (u.u.s.p) {
        if (u.flags) return jx_fail(cx, RB_E_INVALID, "value has no attribute or item '%.*s'", (int)u.u.s.n, u.u.s.p);
        return jx_fail(cx, RB_E_INVALID, "'%.*s' is undefined", (int)u.u.s.n, u.u.s.p);
    }
    return jx_fail(cx, RB_E_INVALID, "use of an undefined value");
}

static jv undef_attr(const char *name, size_t n) {
    jv u = jv_undef_named(name, n);
    u.flags = 1;
    return u;
}

bool jx_buf_to_str(jctx *cx, jbuf *b, jv *out) {
    if (b->failed) {
        bool over = b->over_limit;
        jbuf_free(b);
        if (over) return jx_fail(cx, RB_E_RANGE, "string exceeds the output size limit");
        return jx_oom(cx);
    }
    char *s = jmem_strdup(cx->mem, b->p ? b->p : "", b->n);
    size_t n = b->n;
    const jtaint *t = NULL;
    if (s && b->tn == 1 && b->tr[0].b == 0 && b->tr[0].e >= n) {
        t = &jtaint_all;
    } else if (s && b->tn) {
        jtaint *nt = jmem_alloc(cx->mem, sizeof(jtaint));
        jspan *sp = jmem_alloc(cx->mem, b->tn * sizeof(jspan));
        if (nt && sp) {
            memcpy(sp, b->tr, b->tn * sizeof(jspan));
            nt->n = b->tn;
            nt->r = sp;
        }
        t = nt && sp ? nt : NULL;
        if (!t) s = NULL;
    }
    jbuf_free(b);
    if (!s) return jx_oom(cx);
    *out = jv_str(s, n);
    out->u.s.t = t;
    return true;
}

bool jx_to_str(jctx *cx, jv v, jv *out) {
    if (v.type == JV_STR) {
        *out = v;
        return true;
    }
    if (v.type == JV_UNDEF) {
        *out = jv_str("", 0);
        return true;
    }
    jbuf b;
    jbuf_init(&b, cx->max_output);
    jv_write_str(&b, v);
    return jx_buf_to_str(cx, &b, out);
}

bool jx_iterate(jctx *cx, jv v, jv_list **out) {
    switch ((jv_type)v.type) {
    case JV_LIST: *out = v.u.l; return true;
    case JV_UNDEF: {
        jv_list *l = jv_list_new(cx->mem, 0);
        if (!l) return jx_oom(cx);
        *out = l;
        return true;
    }
    case JV_DICT: {
        jv_list *l = jv_list_new(cx->mem, v.u.d->n);
        if (!l) return jx_oom(cx);
        for (size_t i = 0; i < v.u.d->n; i++) l->v[i] = v.u.d->k[i];
        *out = l;
        return true;
    }
    case JV_STR: {
        size_t n = utf8_len(v.u.s.p, v.u.s.n);
        jv_list *l = jv_list_new(cx->mem, n);
        if (!l) return jx_oom(cx);
        size_t i = 0, k = 0;
        while (i < v.u.s.n && k < n) {
            size_t j = utf8_next(v.u.s.p, v.u.s.n, i);
            if (!jx_substr(cx, v, i, j - i, &l->v[k++])) return false;
            i = j;
        }
        l->n = k;
        *out = l;
        return true;
    }
    default:
        return jx_fail(cx, RB_E_INVALID, "'%s' object is not iterable", jv_type_name(v));
    }
}

static bool make_method(jctx *cx, jv self, const char *name, jv *out) {
    jv_func *fn = jmem_alloc(cx->mem, sizeof(*fn));
    if (!fn) return jx_oom(cx);
    fn->kind = JFN_METHOD;
    fn->self = self;
    fn->name = name;
    out->type = JV_FUNC;
    out->flags = 0;
    out->u.fn = fn;
    return true;
}

static bool loop_attr(jctx *cx, const jv_loop *lp, const char *name, size_t n, jv *out) {
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    int64_t i0 = lp->index0, len = lp->length;
    if (IS("index")) *out = jv_int(i0 + 1);
    else if (IS("index0")) *out = jv_int(i0);
    else if (IS("revindex")) *out = jv_int(len - i0);
    else if (IS("revindex0")) *out = jv_int(len - i0 - 1);
    else if (IS("first")) *out = jv_bool(i0 == 0);
    else if (IS("last")) *out = jv_bool(i0 == len - 1);
    else if (IS("length")) *out = jv_int(len);
    else if (IS("depth")) *out = jv_int(1);
    else if (IS("depth0")) *out = jv_int(0);
    else if (IS("previtem")) *out = i0 > 0 ? lp->items[i0 - 1] : undef_attr(name, n);
    else if (IS("nextitem")) *out = i0 + 1 < len ? lp->items[i0 + 1] : undef_attr(name, n);
    else if (IS("cycle")) {
        jv self = {0};
        self.type = JV_LOOP;
        self.u.loop = (jv_loop *)lp;
        return make_method(cx, self, "cycle", out);
    } else *out = undef_attr(name, n);
    return true;
#undef IS
}

bool jx_getattr(jctx *cx, jv obj, const char *name, size_t n, jv *out) {
    switch ((jv_type)obj.type) {
    case JV_UNDEF: return undefined_error(cx, obj);
    case JV_DICT:
        if (jinja_method_exists(obj, name, n)) {
            char *nm = jmem_strdup(cx->mem, name, n);
            return nm ? make_method(cx, obj, nm, out) : jx_oom(cx);
        }
        /* fallthrough */
    case JV_NS: {
        const jv *v = jv_dict_get_str(obj.u.d, name, n);
        *out = v ? *v : undef_attr(name, n);
        return true;
    }
    case JV_LOOP: return loop_attr(cx, obj.u.loop, name, n, out);
    case JV_STR:
    case JV_LIST:
        if (jinja_method_exists(obj, name, n)) {
            char *nm = jmem_strdup(cx->mem, name, n);
            return nm ? make_method(cx, obj, nm, out) : jx_oom(cx);
        }
        *out = undef_attr(name, n);
        return true;
    default:
        *out = undef_attr(name, n);
        return true;
    }
}

bool jx_getitem(jctx *cx, jv obj, jv key, jv *out) {
    if (obj.type == JV_UNDEF) return undefined_error(cx, obj);
    bool int_key = key.type == JV_INT || key.type == JV_BOOL;
    int64_t k = key.type == JV_BOOL ? key.u.b : key.u.i;
    if (obj.type == JV_LIST && int_key) {
        int64_t n = (int64_t)obj.u.l->n;
        if (k < 0) k += n;
        *out = (k >= 0 && k < n) ? obj.u.l->v[k] : undef_attr("[index]", 7);
        return true;
    }
    if (obj.type == JV_STR && int_key) {
        int64_t n = (int64_t)utf8_len(obj.u.s.p, obj.u.s.n);
        if (k < 0) k += n;
        if (k < 0 || k >= n) {
            *out = undef_attr("[index]", 7);
            return true;
        }
        size_t i = 0;
        for (int64_t c = 0; c < k; c++) i = utf8_next(obj.u.s.p, obj.u.s.n, i);
        return jx_substr(cx, obj, i, utf8_next(obj.u.s.p, obj.u.s.n, i) - i, out);
    }
    if (obj.type == JV_DICT) {
        const jv *v = jv_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return true;
        }
    }
    if (key.type == JV_STR) return jx_getattr(cx, obj, key.u.s.p, key.u.s.n, out);
    *out = undef_attr("[item]", 6);
    return true;
}

/* Python slice index normalisation for length n. */
static void slice_bounds(int64_t n, bool has_start, int64_t start, bool has_stop, int64_t stop, int64_t step,
                         int64_t *s0, int64_t *s1) {
    if (step > 0) {
        if (!has_start) start = 0;
        else if (start < 0) { start += n; if (start < 0) start = 0; }
        else if (start > n) start = n;
        if (!has_stop) stop = n;
        else if (stop < 0) { stop += n; if (stop < 0) stop = 0; }
        else if (stop > n) stop = n;
    } else {
        if (!has_start) start = n - 1;
        else if (start < 0) { start += n; if (start < 0) start = -1; }
        else if (start >= n) start = n - 1;
        if (!has_stop) stop = -1;
        else if (stop < 0) { stop += n; if (stop < 0) stop = -1; }
        else if (stop >= n) stop = n - 1;
    }
    *s0 = start;
    *s1 = stop;
}

static bool eval(jctx *cx, jframe *f, const jnode *x, jv *out);

static bool eval_slice(jctx *cx, jframe *f, const jnode *x, jv *out) {
    jv obj = {0}, parts[3];
    bool has[3] = {false, false, false};
    if (!eval(cx, f, x->a, &obj)) return false;
    const jnode *pn[3] = {x->b, x->c, x->d};
    for (int i = 0; i < 3; i++) {
        if (!pn[i]) continue;
        if (!eval(cx, f, pn[i], &parts[i])) return false;
        if (parts[i].type == JV_NONE) continue;
        if (parts[i].type != JV_INT && parts[i].type != JV_BOOL)
            return jx_fail(cx, RB_E_INVALID, "slice indices must be integers or None");
        if (parts[i].type == JV_BOOL) parts[i] = jv_int(parts[i].u.b);
        has[i] = true;
    }
    int64_t step = has[2] ? parts[2].u.i : 1;
    if (step == 0) return jx_fail(cx, RB_E_INVALID, "slice step cannot be zero");
    if (obj.type == JV_UNDEF) return undefined_error(cx, obj);
    /* collect element boundaries */
    int64_t n;
    size_t *offs = NULL;
    if (obj.type == JV_LIST) {
        n = (int64_t)obj.u.l->n;
    } else if (obj.type == JV_STR) {
        n = (int64_t)utf8_len(obj.u.s.p, obj.u.s.n);
        offs = jmem_alloc(cx->mem, ((size_t)n + 1) * sizeof(size_t));
        if (!offs) return jx_oom(cx);
        size_t i = 0;
        for (int64_t c = 0; c < n; c++) {
            offs[c] = i;
            i = utf8_next(obj.u.s.p, obj.u.s.n, i);
        }
        offs[n] = obj.u.s.n;
    } else {
        *out = undef_attr("[slice]", 7);
        return true;
    }
    int64_t s0, s1;
    slice_bounds(n, has[0], has[0] ? parts[0].u.i : 0, has[1], has[1] ? parts[1].u.i : 0, step, &s0, &s1);
    int64_t count = 0;
    if (step > 0 && s1 > s0) count = (s1 - s0 + step - 1) / step;
    if (step < 0 && s0 > s1) count = (s0 - s1 + (-step) - 1) / (-step);
    if (obj.type == JV_LIST) {
        jv_list *l = jv_list_new(cx->mem, (size_t)count);
        if (!l) return jx_oom(cx);
        for (int64_t i = 0; i < count; i++) l->v[i] = obj.u.l->v[s0 + i * step];
        out->type = JV_LIST;
        out->flags = obj.flags;
        out->u.l = l;
        return true;
    }
    if (step == 1) return jx_substr(cx, obj, count ? offs[s0] : 0, count ? offs[s0 + count] - offs[s0] : 0, out);
    jbuf b;
    jbuf_init(&b, cx->max_output);
    for (int64_t i = 0; i < count; i++) {
        int64_t c = s0 + i * step;
        jbuf_put_sub(&b, obj, offs[c], offs[c + 1] - offs[c]);
    }
    return jx_buf_to_str(cx, &b, out);
}

/* ---- arithmetic ---- */

static bool op_type_error(jctx *cx, const char *op, jv a, jv b) {
    if (a.type == JV_UNDEF) return undefined_error(cx, a);
    if (b.type == JV_UNDEF) return undefined_error(cx, b);
    return jx_fail(cx, RB_E_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                   jv_type_name(b));
}

static int64_t ival(jv v) { return v.type == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static bool intlike(jv v) { return v.type == JV_INT || v.type == JV_BOOL; }

static bool repeat(jctx *cx, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.type == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > cx->max_output / seq.u.s.n)
            return jx_fail(cx, RB_E_RANGE, "string repetition exceeds the output size limit");
        jbuf b;
        jbuf_init(&b, cx->max_output);
        for (int64_t i = 0; i < times; i++) jbuf_put_t(&b, seq.u.s.p, seq.u.s.n, seq.u.s.t);
        return jx_buf_to_str(cx, &b, out);
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (cx->max_output / 16) / n) return jx_fail(cx, RB_E_RANGE, "list repetition too large");
    jv_list *l = jv_list_new(cx->mem, n * (size_t)times);
    if (!l) return jx_oom(cx);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++) l->v[(size_t)i * n + k] = seq.u.l->v[k];
    out->type = JV_LIST;
    out->flags = seq.flags;
    out->u.l = l;
    return true;
}

bool jx_binop(jctx *cx, jop op, jv a, jv b, jv *out) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    bool nums = jv_is_num(a) && jv_is_num(b);
    bool ints = intlike(a) && intlike(b);
    switch (op) {
    case OP_ADD:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(ival(a), ival(b), &r)) return jx_fail(cx, RB_E_RANGE, "integer overflow");
            *out = jv_int(r);
            return true;
        }
        if (nums) { *out = jv_float(jv_num(a) + jv_num(b)); return true; }
        if (a.type == JV_STR && b.type == JV_STR) {
            if (a.u.s.n + b.u.s.n > cx->max_output) return jx_fail(cx, RB_E_RANGE, "string exceeds the output size limit");
            if (a.u.s.t || b.u.s.t) { /* keep both sides' request ranges */
                jbuf cat;
                jbuf_init(&cat, cx->max_output);
                jbuf_put_t(&cat, a.u.s.p, a.u.s.n, a.u.s.t);
                jbuf_put_t(&cat, b.u.s.p, b.u.s.n, b.u.s.t);
                return jx_buf_to_str(cx, &cat, out);
            }
            char *s = jmem_alloc(cx->mem, a.u.s.n + b.u.s.n + 1);
            if (!s) return jx_oom(cx);
            if (a.u.s.n) memcpy(s, a.u.s.p, a.u.s.n);
            if (b.u.s.n) memcpy(s + a.u.s.n, b.u.s.p, b.u.s.n);
            *out = jv_str(s, a.u.s.n + b.u.s.n);
            return true;
        }
        if (a.type == JV_LIST && b.type == JV_LIST && (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE)) {
            jv_list *l = jv_list_new(cx->mem, a.u.l->n + b.u.l->n);
            if (!l) return jx_oom(cx);
            if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            out->type = JV_LIST;
            out->flags = a.flags;
            out->u.l = l;
            return true;
        }
        break;
    case OP_SUB:
        if (ints) {
            int64_t r;
            if (__builtin_sub_overflow(ival(a), ival(b), &r)) return jx_fail(cx, RB_E_RANGE, "integer overflow");
            *out = jv_int(r);
            return true;
        }
        if (nums) { *out = jv_float(jv_num(a) - jv_num(b)); return true; }
        break;
    case OP_MUL:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(ival(a), ival(b), &r)) return jx_fail(cx, RB_E_RANGE, "integer overflow");
            *out = jv_int(r);
            return true;
        }
        if (nums) { *out = jv_float(jv_num(a) * jv_num(b)); return true; }
        if ((a.type == JV_STR || a.type == JV_LIST) && intlike(b)) return repeat(cx, a, ival(b), out);
        if ((b.type == JV_STR || b.type == JV_LIST) && intlike(a)) return repeat(cx, b, ival(a), out);
        break;
    case OP_DIV:
        if (nums) {
            if (jv_num(b) == 0.0) return jx_fail(cx, RB_E_INVALID, "division by zero");
            *out = jv_float(jv_num(a) / jv_num(b));
            return true;
        }
        break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (ints) {
            int64_t x = ival(a), y = ival(b);
            if (y == 0) return jx_fail(cx, RB_E_INVALID, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return jx_fail(cx, RB_E_RANGE, "integer overflow");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) { q -= 1; r += y; }
            *out = jv_int(op == OP_MOD ? r : q);
            return true;
        }
        if (nums) {
            double x = jv_num(a), y = jv_num(b);
            if (y == 0.0) return jx_fail(cx, RB_E_INVALID, "float division or modulo by zero");
            double r = fmod(x, y);
            if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
            *out = jv_float(op == OP_MOD ? r : floor(x / y));
            return true;
        }
        break;
    case OP_POW:
        if (ints && ival(b) >= 0) {
            int64_t base = ival(a), e = ival(b), r = 1;
            while (e > 0) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return jx_fail(cx, RB_E_RANGE, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return jx_fail(cx, RB_E_RANGE, "integer overflow");
            }
            *out = jv_int(r);
            return true;
        }
        if (nums) { *out = jv_float(pow(jv_num(a), jv_num(b))); return true; }
        break;
    default:
        break;
    }
    return op_type_error(cx, (unsigned)op < 7 ? names[op] : "?", a, b);
}

static bool order(jctx *cx, jv a, jv b, int *cmp) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (intlike(a) && intlike(b)) *cmp = ival(a) < ival(b) ? -1 : ival(a) > ival(b);
        else *cmp = jv_num(a) < jv_num(b) ? -1 : jv_num(a) > jv_num(b);
        return true;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = m ? memcmp(a.u.s.p, b.u.s.p, m) : 0;
        *cmp = c ? (c < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n);
        return true;
    }
    if (a.type == JV_LIST && b.type == JV_LIST) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return order(cx, a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return true;
    }
    if (a.type == JV_UNDEF) return undefined_error(cx, a);
    if (b.type == JV_UNDEF) return undefined_error(cx, b);
    return jx_fail(cx, RB_E_INVALID, "ordering not supported between instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}

bool jx_compare(jctx *cx, jop op, jv a, jv b, bool *res) {
    int c = 0;
    switch (op) {
    case OP_EQ: *res = jv_equal(a, b); return true;
    case OP_NE: *res = !jv_equal(a, b); return true;
    case OP_LT: if (!order(cx, a, b, &c)) return false; *res = c < 0; return true;
    case OP_LE: if (!order(cx, a, b, &c)) return false; *res = c <= 0; return true;
    case OP_GT: if (!order(cx, a, b, &c)) return false; *res = c > 0; return true;
    case OP_GE: if (!order(cx, a, b, &c)) return false; *res = c >= 0; return true;
    case OP_IN:
    case OP_NOTIN: {
        bool found = false;
        if (b.type == JV_STR) {
            if (a.type != JV_STR)
                return jx_fail(cx, RB_E_INVALID, "'in <string>' requires string as left operand, not %s", jv_type_name(a));
            if (a.u.s.n == 0) found = true;
            else if (a.u.s.n <= b.u.s.n) found = memmem(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL;
        } else if (b.type == JV_LIST) {
            for (size_t i = 0; i < b.u.l->n && !found; i++) found = jv_equal(a, b.u.l->v[i]);
        } else if (b.type == JV_DICT || b.type == JV_NS) {
            found = jv_dict_get(b.u.d, a) != NULL;
        } else if (b.type != JV_UNDEF) {
            return jx_fail(cx, RB_E_INVALID, "argument of type '%s' is not iterable", jv_type_name(b));
        }
        *res = op == OP_IN ? found : !found;
        return true;
    }
    default:
        return jx_fail(cx, RB_E_INVALID, "bad comparison operator");
    }
}

/* ---- calls ---- */

static bool exec_body(jctx *cx, jframe *f, const jnodes *body);

static bool call_macro(jctx *cx, const jv_func *fn, const jargs *a, jv *out) {
    const jnode *m = fn->macro;
    if (a->npos > m->n_targets)
        return jx_fail(cx, RB_E_INVALID, "macro '%.*s' takes not more than %zu argument(s)", (int)m->name_len, m->name,
                       m->n_targets);
    if (++cx->depth > cx->max_depth) return jx_fail(cx, RB_E_RANGE, "recursion depth limit of %u exceeded", cx->max_depth);
    jframe fr = {.parent = fn->closure};
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < m->n_targets; i++)
            known |= m->target_lens[i] == a->kwl[k] && memcmp(m->targets[i], a->kwn[k], a->kwl[k]) == 0;
        if (!known) return jx_fail(cx, RB_E_INVALID, "macro '%.*s' has no parameter '%.*s'", (int)m->name_len, m->name, (int)a->kwl[k], a->kwn[k]);
    }
    for (size_t i = 0; i < m->n_targets; i++) {
        jv v = jv_undef_named(m->targets[i], m->target_lens[i]);
        bool set = false;
        if (i < a->npos) { v = a->pos[i]; set = true; }
        for (size_t k = 0; k < a->nkw && !set; k++) {
            if (m->target_lens[i] == a->kwl[k] && memcmp(m->targets[i], a->kwn[k], a->kwl[k]) == 0) {
                v = a->kwv[k];
                set = true;
            }
        }
        if (!set && m->vals.v[i] && !eval(cx, &fr, m->vals.v[i], &v)) return false;
        if (!jframe_set(cx, &fr, m->targets[i], m->target_lens[i], v)) return false;
    }
    jbuf buf, *saved = cx->out;
    jbuf_init(&buf, cx->max_output);
    cx->out = &buf;
    int saved_ctl = cx->loopctl;
    bool ok = exec_body(cx, &fr, &m->body);
    cx->out = saved;
    cx->loopctl = saved_ctl;
    cx->depth--;
    if (!ok) {
        jbuf_free(&buf);
        return false;
    }
    return jx_buf_to_str(cx, &buf, out);
}

bool jx_call(jctx *cx, jv fn, const jv *args, size_t nargs, const char **kwn, const size_t *kwl, const jv *kwv,
             size_t nkw, jv *out) {
    jargs a = {.pos = args, .npos = nargs, .kwn = kwn, .kwl = kwl, .kwv = kwv, .nkw = nkw};
    if (fn.type == JV_UNDEF) return undefined_error(cx, fn);
    if (fn.type != JV_FUNC) return jx_fail(cx, RB_E_INVALID, "'%s' object is not callable", jv_type_name(fn));
    if (fn.u.fn->kind == JFN_MACRO) return call_macro(cx, fn.u.fn, &a, out);
    if (fn.u.fn->kind == JFN_METHOD)
        return jinja_method(cx, fn.u.fn->self, fn.u.fn->name, strlen(fn.u.fn->name), &a, out);
    return jinja_call_builtin(cx, fn.u.fn, &a, out);
}

/* Evaluates call-style arguments of node x into arena arrays. */
static bool eval_args(jctx *cx, jframe *f, const jnode *x, jargs *a, const jv *first) {
    size_t extra = first ? 1 : 0;
    jv *pos = jmem_alloc(cx->mem, (x->args.n + extra + 1) * sizeof(jv));
    const char **kwn = jmem_alloc(cx->mem, (x->kwargs.n + 1) * sizeof(char *));
    size_t *kwl = jmem_alloc(cx->mem, (x->kwargs.n + 1) * sizeof(size_t));
    jv *kwv = jmem_alloc(cx->mem, (x->kwargs.n + 1) * sizeof(jv));
    if (!pos || !kwn || !kwl || !kwv) return jx_oom(cx);
    if (first) pos[0] = *first;
    for (size_t i = 0; i < x->args.n; i++)
        if (!eval(cx, f, x->args.v[i], &pos[i + extra])) return false;
    for (size_t i = 0; i < x->kwargs.n; i++) {
        kwn[i] = x->kwargs.v[i]->name;
        kwl[i] = x->kwargs.v[i]->name_len;
        if (!eval(cx, f, x->kwargs.v[i]->a, &kwv[i])) return false;
    }
    a->pos = pos;
    a->npos = x->args.n + extra;
    a->kwn = kwn;
    a->kwl = kwl;
    a->kwv = kwv;
    a->nkw = x->kwargs.n;
    return true;
}

static bool apply_filter(jctx *cx, jframe *f, const jnode *x, jv in, jv *out) {
    jargs a;
    if (!eval_args(cx, f, x, &a, NULL)) return false;
    cx->line = x->line;
    return jinja_filter(cx, x->name, x->name_len, in, &a, out);
}

static bool apply_chain(jctx *cx, jframe *f, const jnode *chain, jv in, jv *out) {
    if (chain->a && !apply_chain(cx, f, chain->a, in, &in)) return false;
    return apply_filter(cx, f, chain, in, out);
}

/* ---- expressions ---- */

static bool eval(jctx *cx, jframe *f, const jnode *x, jv *out) {
    cx->line = x->line;
    switch (x->kind) {
    case N_CONST: *out = x->value; return true;
    case N_NAME: {
        const jv *v = jframe_lookup(f, x->name, x->name_len);
        if (v) { *out = *v; return true; }
        if (jinja_global(x->name, x->name_len, out, cx->mem)) return true;
        if (cx->mem->cap && cx->mem->used >= cx->mem->cap) return jx_oom(cx);
        *out = jv_undef_named(x->name, x->name_len);
        return true;
    }
    case N_GETATTR: {
        jv obj = {0};
        if (!eval(cx, f, x->a, &obj)) return false;
        cx->line = x->line;
        return jx_getattr(cx, obj, x->name, x->name_len, out);
    }
    case N_GETITEM: {
        jv obj = {0}, key = {0};
        if (!eval(cx, f, x->a, &obj) || !eval(cx, f, x->b, &key)) return false;
        cx->line = x->line;
        return jx_getitem(cx, obj, key, out);
    }
    case N_SLICE: return eval_slice(cx, f, x, out);
    case N_CALL: {
        jargs a;
        if (x->a->kind == N_GETATTR) {
            jv obj = {0};
            if (!eval(cx, f, x->a->a, &obj)) return false;
            cx->line = x->line;
            if (obj.type != JV_UNDEF && obj.type != JV_LOOP &&
                jinja_method_exists(obj, x->a->name, x->a->name_len)) {
                if (!eval_args(cx, f, x, &a, NULL)) return false;
                cx->line = x->line;
                return jinja_method(cx, obj, x->a->name, x->a->name_len, &a, out);
            }
            jv fn = {0};
            if (!jx_getattr(cx, obj, x->a->name, x->a->name_len, &fn)) return false;
            if (!eval_args(cx, f, x, &a, NULL)) return false;
            cx->line = x->line;
            return jx_call(cx, fn, a.pos, a.npos, a.kwn, a.kwl, a.kwv, a.nkw, out);
        }
        jv fn = {0};
        if (!eval(cx, f, x->a, &fn) || !eval_args(cx, f, x, &a, NULL)) return false;
        cx->line = x->line;
        return jx_call(cx, fn, a.pos, a.npos, a.kwn, a.kwl, a.kwv, a.nkw, out);
    }
    case N_FILTER: {
        jv in = {0};
        if (!eval(cx, f, x->a, &in)) return false;
        return apply_filter(cx, f, x, in, out);
    }
    case N_TEST: {
        jv in = {0};
        jargs a;
        bool r = false;
        if (!eval(cx, f, x->a, &in) || !eval_args(cx, f, x, &a, NULL)) return false;
        cx->line = x->line;
        if (!jinja_test(cx, x->name, x->name_len, in, &a, &r)) return false;
        *out = jv_bool(x->negate ? !r : r);
        return true;
    }
    case N_BINOP: {
        jv a = {0}, b = {0};
        if (!eval(cx, f, x->a, &a) || !eval(cx, f, x->b, &b)) return false;
        cx->line = x->line;
        return jx_binop(cx, x->op, a, b, out);
    }
    case N_AND:
    case N_OR: {
        jv a = {0};
        if (!eval(cx, f, x->a, &a)) return false;
        bool t = jv_truthy(a);
        if ((x->kind == N_AND) != t) {
            *out = a;
            return true;
        }
        return eval(cx, f, x->b, out);
    }
    case N_NOT: {
        jv a = {0};
        if (!eval(cx, f, x->a, &a)) return false;
        *out = jv_bool(!jv_truthy(a));
        return true;
    }
    case N_NEG:
    case N_POS: {
        jv a = {0};
        if (!eval(cx, f, x->a, &a)) return false;
        cx->line = x->line;
        if (x->kind == N_POS && jv_is_num(a)) {
            *out = a.type == JV_BOOL ? jv_int(a.u.b) : a;
            return true;
        }
        if (intlike(a) && ival(a) != INT64_MIN) { *out = jv_int(-ival(a)); return true; }
        if (a.type == JV_FLOAT) { *out = jv_float(-a.u.f); return true; }
        if (a.type == JV_UNDEF) return undefined_error(cx, a);
        return jx_fail(cx, RB_E_INVALID, "bad operand type for unary %c: '%s'", x->kind == N_NEG ? '-' : '+', jv_type_name(a));
    }
    case N_COMPARE: {
        jv l = {0};
        if (!eval(cx, f, x->a, &l)) return false;
        for (size_t i = 0; i < x->vals.n; i++) {
            jv r = {0};
            bool res = false;
            if (!eval(cx, f, x->vals.v[i], &r)) return false;
            cx->line = x->line;
            if (!jx_compare(cx, x->ops[i], l, r, &res)) return false;
            if (!res) {
                *out = jv_bool(false);
                return true;
            }
            l = r;
        }
        *out = jv_bool(true);
        return true;
    }
    case N_COND: {
        jv c = {0};
        if (!eval(cx, f, x->b, &c)) return false;
        if (jv_truthy(c)) return eval(cx, f, x->a, out);
        if (x->c) return eval(cx, f, x->c, out);
        *out = jv_undef();
        return true;
    }
    case N_LIST:
    case N_TUPLE: {
        jv_list *l = jv_list_new(cx->mem, x->args.n);
        if (!l) return jx_oom(cx);
        for (size_t i = 0; i < x->args.n; i++)
            if (!eval(cx, f, x->args.v[i], &l->v[i])) return false;
        out->type = JV_LIST;
        out->flags = x->kind == N_TUPLE ? JV_F_TUPLE : 0;
        out->u.l = l;
        return true;
    }
    case N_DICT: {
        jv_dict *d = jv_dict_new(cx->mem, x->args.n);
        if (!d) return jx_oom(cx);
        for (size_t i = 0; i < x->args.n; i++) {
            jv k = {0}, v = {0};
            if (!eval(cx, f, x->args.v[i], &k) || !eval(cx, f, x->vals.v[i], &v)) return false;
            if (k.type == JV_LIST && !(k.flags & JV_F_TUPLE)) return jx_fail(cx, RB_E_INVALID, "unhashable type: 'list'");
            if (k.type == JV_DICT) return jx_fail(cx, RB_E_INVALID, "unhashable type: 'dict'");
            if (!jv_dict_set(cx->mem, d, k, v)) return jx_oom(cx);
        }
        out->type = JV_DICT;
        out->flags = 0;
        out->u.d = d;
        return true;
    }
    case N_CONCAT: {
        jbuf b;
        jbuf_init(&b, cx->max_output);
        for (size_t i = 0; i < x->args.n; i++) {
            jv v = {0};
            if (!eval(cx, f, x->args.v[i], &v)) {
                jbuf_free(&b);
                return false;
            }
            if (v.type != JV_UNDEF) jv_write_str(&b, v);
        }
        return jx_buf_to_str(cx, &b, out);
    }
    default:
        return jx_fail(cx, RB_E_INVALID, "statement used as expression");
    }
}

/* ---- statements ---- */

static bool assign_targets(jctx *cx, jframe *f, const jnode *x, jv v) {
    if (x->n_targets == 1) return jframe_set(cx, f, x->targets[0], x->target_lens[0], v);
    jv_list *items;
    if (!jx_iterate(cx, v, &items)) return false;
    if (items->n != x->n_targets)
        return jx_fail(cx, RB_E_INVALID, "%s values to unpack (expected %zu, got %zu)",
                       items->n > x->n_targets ? "too many" : "not enough", x->n_targets, items->n);
    for (size_t i = 0; i < x->n_targets; i++)
        if (!jframe_set(cx, f, x->targets[i], x->target_lens[i], items->v[i])) return false;
    return true;
}

static bool write_out(jctx *cx, jv v) {
    if (v.type == JV_UNDEF) return true;
    jv_write_str(cx->out, v);
    if (cx->out->failed) {
        if (cx->out->over_limit) return jx_fail(cx, RB_E_RANGE, "output exceeds the limit of %zu bytes", cx->max_output);
        return jx_oom(cx);
    }
    return true;
}

static bool capture(jctx *cx, jframe *f, const jnodes *body, jv *out) {
    jbuf buf, *saved = cx->out;
    jbuf_init(&buf, cx->max_output);
    cx->out = &buf;
    bool ok = exec_body(cx, f, body);
    cx->out = saved;
    if (!ok) {
        jbuf_free(&buf);
        return false;
    }
    return jx_buf_to_str(cx, &buf, out);
}

static const char LOOP_NAME[] = "loop";

static bool exec_for(jctx *cx, jframe *f, const jnode *x) {
    jv seq = {0};
    jv_list *items;
    if (!eval(cx, f, x->a, &seq)) return false;
    cx->line = x->line;
    if (!jx_iterate(cx, seq, &items)) return false;
    if (x->b) {
        jv_list *kept = jv_list_new(cx->mem, items->n);
        if (!kept) return jx_oom(cx);
        size_t n = 0;
        for (size_t i = 0; i < items->n; i++) {
            jframe tmp = {.parent = f};
            jv c = {0};
            if (!jx_step(cx) || !assign_targets(cx, &tmp, x, items->v[i]) || !eval(cx, &tmp, x->b, &c)) return false;
            if (jv_truthy(c)) kept->v[n++] = items->v[i];
        }
        kept->n = n;
        items = kept;
    }
    if (items->n == 0) return exec_body(cx, f, &x->else_body);
    jv_loop *lp = jmem_alloc(cx->mem, sizeof(*lp));
    if (!lp) return jx_oom(cx);
    lp->items = items->v;
    lp->length = (int64_t)items->n;
    jv loopv = {0};
    loopv.type = JV_LOOP;
    loopv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        if (!jx_step(cx)) return false;
        lp->index0 = (int64_t)i;
        jframe it = {.parent = f};
        cx->line = x->line;
        if (!jframe_set(cx, &it, LOOP_NAME, 4, loopv) || !assign_targets(cx, &it, x, items->v[i])) return false;
        if (!exec_body(cx, &it, &x->body)) return false;
        if (cx->loopctl == 1) {
            cx->loopctl = 0;
            break;
        }
        cx->loopctl = 0;
    }
    return true;
}

static bool exec_stmt(jctx *cx, jframe *f, const jnode *x) {
    cx->line = x->line;
    if (!jx_step(cx)) return false;
    switch (x->kind) {
    case N_DATA:
        jbuf_put(cx->out, x->value.u.s.p, x->value.u.s.n);
        if (cx->out->failed) return write_out(cx, jv_str("", 0));
        return true;
    case N_OUTPUT: {
        jv v = {0};
        if (!eval(cx, f, x->a, &v)) return false;
        return write_out(cx, v);
    }
    case N_IF: {
        jv c = {0};
        if (!eval(cx, f, x->a, &c)) return false;
        return exec_body(cx, f, jv_truthy(c) ? &x->body : &x->else_body);
    }
    case N_FOR:
        if (++cx->depth > cx->max_depth) return jx_fail(cx, RB_E_RANGE, "nesting depth limit of %u exceeded", cx->max_depth);
        {
            bool ok = exec_for(cx, f, x);
            cx->depth--;
            return ok;
        }
    case N_SET: {
        jv v = {0};
        if (!eval(cx, f, x->a, &v)) return false;
        cx->line = x->line;
        if (x->name) {
            const jv *ns = jframe_lookup(f, x->targets[0], x->target_lens[0]);
            if (!ns || ns->type != JV_NS)
                return jx_fail(cx, RB_E_INVALID, "cannot assign attribute on non-namespace object '%.*s'",
                               (int)x->target_lens[0], x->targets[0]);
            return jv_dict_set(cx->mem, ns->u.d, jv_str(x->name, x->name_len), v) ? true : jx_oom(cx);
        }
        return assign_targets(cx, f, x, v);
    }
    case N_SETBLOCK: {
        jv v = {0};
        if (!capture(cx, f, &x->body, &v)) return false;
        if (x->c && !apply_chain(cx, f, x->c, v, &v)) return false;
        return jframe_set(cx, f, x->targets[0], x->target_lens[0], v);
    }
    case N_MACRO: {
        jv_func *fn = jmem_alloc(cx->mem, sizeof(*fn));
        if (!fn) return jx_oom(cx);
        fn->kind = JFN_MACRO;
        fn->macro = x;
        fn->closure = f;
        jv v = {0};
        v.type = JV_FUNC;
        v.u.fn = fn;
        return jframe_set(cx, f, x->name, x->name_len, v);
    }
    case N_BREAK: cx->loopctl = 1; return true;
    case N_CONTINUE: cx->loopctl = 2; return true;
    case N_FILTERBLOCK: {
        jv v = {0};
        if (!capture(cx, f, &x->body, &v) || !apply_chain(cx, f, x->c, v, &v)) return false;
        return write_out(cx, v);
    }
    case N_WITH: {
        jframe inner = {.parent = f};
        for (size_t i = 0; i < x->n_targets; i++) {
            jv v = {0};
            if (!eval(cx, f, x->args.v[i], &v) || !jframe_set(cx, &inner, x->targets[i], x->target_lens[i], v))
                return false;
        }
        return exec_body(cx, &inner, &x->body);
    }
    case N_BODY: return exec_body(cx, f, &x->body);
    default: return jx_fail(cx, RB_E_INVALID, "expression used as statement");
    }
}

static bool exec_body(jctx *cx, jframe *f, const jnodes *body) {
    if (++cx->depth > cx->max_depth) return jx_fail(cx, RB_E_RANGE, "nesting depth limit of %u exceeded", cx->max_depth);
    bool ok = true;
    for (size_t i = 0; i < body->n && ok; i++) {
        ok = exec_stmt(cx, f, body->v[i]);
        if (cx->loopctl) break;
    }
    cx->depth--;
    return ok;
}

rb_status jinja_render(jctx *cx, const jtemplate *t, jframe *vars) {
    cx->failed = false;
    cx->failcode = RB_OK;
    cx->loopctl = 0;
    if (!exec_body(cx, vars, &t->root)) return cx->failcode ? cx->failcode : RB_E_INVALID;
    return RB_OK;
}
