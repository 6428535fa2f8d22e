/* Recursive-descent parser for the Jinja subset: turns the token stream into
 * the statement/expression tree evaluated by jinja_eval.c, following jinja2's
 * grammar and operator precedence (filters bind tighter than arithmetic,
 * '~' tighter than '+'/'-', chained comparisons, 'x if c else y'). */
#include "chat/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_NESTING 200

typedef struct parser {
    jmem *m;
    jtok *tk;
    size_t i, n;
    rb_error *err;
    int depth;
    int loop_depth;
    bool failed;
    rb_status code;
} parser;

static bool pfail(parser *P, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool pfail(parser *P, int line, const char *fmt, ...) {
    if (!P->failed) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        rb_error_set(P->err, RB_E_FORMAT, "chat template syntax error at line %d: %s", line, msg);
        P->failed = true;
        P->code = RB_E_FORMAT;
    }
    return false;
}

static bool poom(parser *P) {
    if (!P->failed) {
        rb_error_set(P->err, RB_E_NOMEM, "out of memory while parsing chat template");
        P->failed = true;
        P->code = RB_E_NOMEM;
    }
    return false;
}

static jtok *cur(parser *P) { return &P->tk[P->i]; }
static jtok *peek(parser *P, size_t k) { return &P->tk[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static bool tok_is(const jtok *t, jtok_type type, const char *s) {
    if (t->type != type) return false;
    size_t l = strlen(s);
    return t->n == l && memcmp(t->s, s, l) == 0;
}
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), T_OP, s); }
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), T_NAME, s); }

static const char *tok_desc(const jtok *t, char *buf, size_t len) {
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "string literal";
    case T_INT: case T_FLOAT: return "number";
    default: break;
    }
    snprintf(buf, len, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return buf;
}

static bool expect_op(parser *P, const char *s) {
    if (is_op(P, s)) { adv(P); return true; }
    char b1[64], msg[128];
    snprintf(msg, sizeof(msg), "expected '%s', got %s", s, tok_desc(cur(P), b1, sizeof(b1)));
    return pfail(P, cur(P)->line, "%s", msg);
}

static bool expect_type(parser *P, jtok_type type, const char *what) {
    if (cur(P)->type == type) { adv(P); return true; }
    char b1[64], msg[128];
    snprintf(msg, sizeof(msg), "expected %s, got %s", what, tok_desc(cur(P), b1, sizeof(b1)));
    return pfail(P, cur(P)->line, "%s", msg);
}

static jnode *mk(parser *P, jnode_kind k, int line) {
    jnode *x = jmem_alloc(P->m, sizeof(*x));
    if (!x) { poom(P); return NULL; }
    x->kind = k;
    x->line = line;
    return x;
}

static bool push(parser *P, jnodes *ns, jnode *x) {
    if ((ns->n & (ns->n - 1)) == 0) { /* grow at powers of two */
        size_t nc = ns->n ? ns->n * 2 : 1;
        jnode **nv = jmem_alloc(P->m, nc * sizeof(jnode *));
        if (!nv) return poom(P);
        if (ns->n) memcpy(nv, ns->v, ns->n * sizeof(jnode *));
        ns->v = nv;
    }
    ns->v[ns->n++] = x;
    return true;
}

static jnode *parse_expr(parser *P, bool with_condexpr);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_or(parser *P);

static bool enter(parser *P) {
    if (++P->depth > MAX_NESTING) return pfail(P, cur(P)->line, "%s", "expression or block nested too deeply");
    return true;
}

/* Parses "(" args ")" into call-style positional and keyword lists. */
static bool parse_call_args(parser *P, jnodes *args, jnodes *kwargs) {
    if (!expect_op(P, "(")) return false;
    while (!is_op(P, ")")) {
        if (args->n || kwargs->n) {
            if (!expect_op(P, ",")) return false;
            if (is_op(P, ")")) break;
        }
        if (is_op(P, "*") || is_op(P, "**"))
            return pfail(P, cur(P)->line, "%s", "*args / **kwargs in calls are not supported");
        if (cur(P)->type == T_NAME && tok_is(peek(P, 1), T_OP, "=")) {
            jnode *kw = mk(P, N_CONST, cur(P)->line);
            if (!kw) return false;
            kw->name = cur(P)->s;
            kw->name_len = cur(P)->n;
            adv(P);
            adv(P);
            if (!(kw->a = parse_expr(P, true))) return false;
            if (!push(P, kwargs, kw)) return false;
        } else {
            if (kwargs->n) return pfail(P, cur(P)->line, "%s", "positional argument after keyword argument");
            jnode *a = parse_expr(P, true);
            if (!a || !push(P, args, a)) return false;
        }
    }
    return expect_op(P, ")");
}

static jnode *parse_tuple(parser *P, bool with_condexpr, bool explicit_parens, const char *extra_end) {
    int line = cur(P)->line;
    jnodes items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, ",")) return NULL;
        jtok *t = cur(P);
        if (t->type == T_VAR_END || t->type == T_BLOCK_END || tok_is(t, T_OP, ")") ||
            (extra_end && tok_is(t, T_NAME, extra_end)))
            break;
        jnode *e = with_condexpr ? parse_expr(P, true) : parse_or(P);
        if (!e || !push(P, &items, e)) return NULL;
        if (is_op(P, ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) {
            char b[64];
            return pfail(P, line, "expected an expression, got %s", tok_desc(cur(P), b, sizeof(b))), NULL;
        }
    }
    jnode *x = mk(P, N_TUPLE, line);
    if (x) x->args = items;
    return x;
}

static jnode *parse_primary(parser *P) {
    jtok *t = cur(P);
    jnode *x;
    if (t->type == T_NAME) {
        if (tok_is(t, T_NAME, "true") || tok_is(t, T_NAME, "True") || tok_is(t, T_NAME, "false") ||
            tok_is(t, T_NAME, "False")) {
            if (!(x = mk(P, N_CONST, t->line))) return NULL;
            x->value = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (tok_is(t, T_NAME, "none") || tok_is(t, T_NAME, "None")) {
            if (!(x = mk(P, N_CONST, t->line))) return NULL;
            x->value = jv_none();
        } else {
            if (!(x = mk(P, N_NAME, t->line))) return NULL;
            x->name = t->s;
            x->name_len = t->n;
        }
        adv(P);
        return x;
    }
    if (t->type == T_STRING) {
        if (!(x = mk(P, N_CONST, t->line))) return NULL;
        size_t total = 0, k = P->i;
        while (P->tk[k].type == T_STRING) total += P->tk[k++].n;
        if (k == P->i + 1) {
            x->value = jv_str(t->s, t->n);
            adv(P);
        } else {
            char *s = jmem_alloc(P->m, total + 1);
            if (!s) return poom(P), NULL;
            size_t o = 0;
            while (cur(P)->type == T_STRING) {
                memcpy(s + o, cur(P)->s, cur(P)->n);
                o += cur(P)->n;
                adv(P);
            }
            x->value = jv_str(s, total);
        }
        return x;
    }
    if (t->type == T_INT || t->type == T_FLOAT) {
        if (!(x = mk(P, N_CONST, t->line))) return NULL;
        x->value = t->type == T_INT ? jv_int(t->ival) : jv_float(t->fval);
        adv(P);
        return x;
    }
    if (tok_is(t, T_OP, "(")) {
        adv(P);
        x = parse_tuple(P, true, true, NULL);
        if (!x || !expect_op(P, ")")) return NULL;
        return x;
    }
    if (tok_is(t, T_OP, "[")) {
        adv(P);
        if (!(x = mk(P, N_LIST, t->line))) return NULL;
        while (!is_op(P, "]")) {
            if (x->args.n && !expect_op(P, ",")) return NULL;
            if (is_op(P, "]")) break;
            jnode *e = parse_expr(P, true);
            if (!e || !push(P, &x->args, e)) return NULL;
        }
        adv(P);
        return x;
    }
    if (tok_is(t, T_OP, "{")) {
        adv(P);
        if (!(x = mk(P, N_DICT, t->line))) return NULL;
        while (!is_op(P, "}")) {
            if (x->args.n && !expect_op(P, ",")) return NULL;
            if (is_op(P, "}")) break;
            jnode *k = parse_expr(P, true);
            if (!k || !expect_op(P, ":")) return NULL;
            jnode *v = parse_expr(P, true);
            if (!v || !push(P, &x->args, k) || !push(P, &x->vals, v)) return NULL;
        }
        adv(P);
        return x;
    }
    char b[64];
    return pfail(P, t->line, "unexpected %s", tok_desc(t, b, sizeof(b))), NULL;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    jtok *t = cur(P);
    jnode *x;
    if (tok_is(t, T_OP, ".")) {
        adv(P);
        jtok *a = cur(P);
        if (a->type == T_NAME) {
            if (!(x = mk(P, N_GETATTR, t->line))) return NULL;
            x->a = obj;
            x->name = a->s;
            x->name_len = a->n;
            adv(P);
            return x;
        }
        if (a->type == T_INT) {
            if (!(x = mk(P, N_GETITEM, t->line))) return NULL;
            x->a = obj;
            if (!(x->b = mk(P, N_CONST, a->line))) return NULL;
            x->b->value = jv_int(a->ival);
            adv(P);
            return x;
        }
        return pfail(P, a->line, "%s", "expected a name after '.'"), NULL;
    }
    /* '[' */
    adv(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(P, ":")) {
            is_slice = true;
            adv(P);
            if (++nparts > 2) return pfail(P, cur(P)->line, "%s", "too many ':' in slice"), NULL;
            continue;
        }
        if (is_op(P, "]")) break;
        if (parts[nparts]) return pfail(P, cur(P)->line, "%s", "expected ']'"), NULL;
        if (!(parts[nparts] = parse_tuple(P, true, false, NULL))) return NULL;
        if (!is_op(P, ":") && !is_op(P, "]")) return expect_op(P, "]"), NULL;
    }
    adv(P);
    if (is_slice) {
        if (!(x = mk(P, N_SLICE, t->line))) return NULL;
        x->a = obj;
        x->b = parts[0];
        x->c = parts[1];
        x->d = parts[2];
        return x;
    }
    if (!parts[0]) return pfail(P, t->line, "%s", "empty subscript"), NULL;
    if (!(x = mk(P, N_GETITEM, t->line))) return NULL;
    x->a = obj;
    x->b = parts[0];
    return x;
}

static jnode *parse_postfix(parser *P, jnode *x) {
    for (;;) {
        if (!x) return NULL;
        if (is_op(P, ".") || is_op(P, "[")) {
            x = parse_subscript(P, x);
        } else if (is_op(P, "(")) {
            jnode *c = mk(P, N_CALL, cur(P)->line);
            if (!c) return NULL;
            c->a = x;
            if (!parse_call_args(P, &c->args, &c->kwargs)) return NULL;
            x = c;
        } else {
            return x;
        }
    }
}

static bool parse_dotted_name(parser *P, const char **name, size_t *len) {
    if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "a name");
    const char *s = cur(P)->s;
    size_t n = cur(P)->n;
    adv(P);
    while (is_op(P, ".") && peek(P, 1)->type == T_NAME) {
        adv(P);
        n = (size_t)(cur(P)->s + cur(P)->n - s);
        adv(P);
    }
    *name = s;
    *len = n;
    return true;
}

static jnode *parse_filter(parser *P, jnode *input) {
    int line = cur(P)->line;
    adv(P); /* '|' */
    jnode *f = mk(P, N_FILTER, line);
    if (!f) return NULL;
    f->a = input;
    if (!parse_dotted_name(P, &f->name, &f->name_len)) return NULL;
    if (is_op(P, "(") && !parse_call_args(P, &f->args, &f->kwargs)) return NULL;
    return f;
}

static jnode *parse_test(parser *P, jnode *input) {
    int line = cur(P)->line;
    adv(P); /* 'is' */
    jnode *x = mk(P, N_TEST, line);
    if (!x) return NULL;
    x->a = input;
    if (is_name(P, "not")) {
        x->negate = true;
        adv(P);
    }
    if (!parse_dotted_name(P, &x->name, &x->name_len)) return NULL;
    jtok *t = cur(P);
    if (is_op(P, "(")) {
        if (!parse_call_args(P, &x->args, &x->kwargs)) return NULL;
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
                tok_is(t, T_OP, "[") || tok_is(t, T_OP, "{")) &&
               !tok_is(t, T_NAME, "else") && !tok_is(t, T_NAME, "or") && !tok_is(t, T_NAME, "and")) {
        if (tok_is(t, T_NAME, "is")) return pfail(P, t->line, "%s", "cannot chain multiple tests with 'is'"), NULL;
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg || !push(P, &x->args, arg)) return NULL;
    }
    return x;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    if (!enter(P)) return NULL;
    jtok *t = cur(P);
    jnode *x;
    if (tok_is(t, T_OP, "-") || tok_is(t, T_OP, "+")) {
        adv(P);
        if (!(x = mk(P, t->s[0] == '-' ? N_NEG : N_POS, t->line))) return NULL;
        if (!(x->a = parse_unary(P, false))) return NULL;
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    while (x && with_filter) {
        if (is_op(P, "|")) x = parse_filter(P, x);
        else if (is_name(P, "is")) x = parse_test(P, x);
        else if (is_op(P, "(")) x = parse_postfix(P, x);
        else break;
    }
    P->depth--;
    return x;
}

static jnode *binop(parser *P, jop op, jnode *l, jnode *r, int line) {
    if (!l || !r) return NULL;
    jnode *x = mk(P, N_BINOP, line);
    if (!x) return NULL;
    x->op = op;
    x->a = l;
    x->b = r;
    return x;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, true);
    while (l && is_op(P, "**")) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    for (;;) {
        if (!l) return NULL;
        jop op;
        if (is_op(P, "*")) op = OP_MUL;
        else if (is_op(P, "/")) op = OP_DIV;
        else if (is_op(P, "//")) op = OP_FLOORDIV;
        else if (is_op(P, "%")) op = OP_MOD;
        else return l;
        int line = cur(P)->line;
        adv(P);
        l = binop(P, op, l, parse_pow(P), line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *first = parse_math2(P);
    if (!first || !is_op(P, "~")) return first;
    jnode *x = mk(P, N_CONCAT, cur(P)->line);
    if (!x || !push(P, &x->args, first)) return NULL;
    while (is_op(P, "~")) {
        adv(P);
        jnode *e = parse_math2(P);
        if (!e || !push(P, &x->args, e)) return NULL;
    }
    return x;
}

static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    for (;;) {
        if (!l) return NULL;
        jop op;
        if (is_op(P, "+")) op = OP_ADD;
        else if (is_op(P, "-")) op = OP_SUB;
        else return l;
        int line = cur(P)->line;
        adv(P);
        l = binop(P, op, l, parse_concat(P), line);
    }
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    jnode *x = NULL;
    jop ops[64];
    for (;;) {
        jop op;
        if (is_op(P, "==")) op = OP_EQ;
        else if (is_op(P, "!=")) op = OP_NE;
        else if (is_op(P, "<")) op = OP_LT;
        else if (is_op(P, "<=")) op = OP_LE;
        else if (is_op(P, ">")) op = OP_GT;
        else if (is_op(P, ">=")) op = OP_GE;
        else if (is_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), T_NAME, "in")) { op = OP_NOTIN; adv(P); }
        else break;
        adv(P);
        if (!x) {
            if (!(x = mk(P, N_COMPARE, line))) return NULL;
            x->a = first;
        }
        if (x->vals.n >= 64) return pfail(P, line, "%s", "comparison chain too long"), NULL;
        ops[x->vals.n] = op;
        jnode *r = parse_math1(P);
        if (!r || !push(P, &x->vals, r)) return NULL;
    }
    if (!x) return first;
    x->ops = jmem_alloc(P->m, x->vals.n * sizeof(jop));
    if (!x->ops) return poom(P), NULL;
    memcpy(x->ops, ops, x->vals.n * sizeof(jop));
    return x;
}

static jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        int line = cur(P)->line;
        adv(P);
        if (!enter(P)) return NULL;
        jnode *x = mk(P, N_NOT, line);
        if (x && !(x->a = parse_not(P))) x = NULL;
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (l && is_name(P, "and")) {
        int line = cur(P)->line;
        adv(P);
        jnode *r = parse_not(P);
        jnode *x = r ? mk(P, N_AND, line) : NULL;
        if (!x) return NULL;
        x->a = l;
        x->b = r;
        l = x;
    }
    return l;
}

static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (l && is_name(P, "or")) {
        int line = cur(P)->line;
        adv(P);
        jnode *r = parse_and(P);
        jnode *x = r ? mk(P, N_OR, line) : NULL;
        if (!x) return NULL;
        x->a = l;
        x->b = r;
        l = x;
    }
    return l;
}

static jnode *parse_expr(parser *P, bool with_condexpr) {
    if (!enter(P)) return NULL;
    jnode *x = parse_or(P);
    while (x && with_condexpr && is_name(P, "if")) {
        int line = cur(P)->line;
        adv(P);
        jnode *c = mk(P, N_COND, line);
        if (!c) return NULL;
        c->a = x;
        if (!(c->b = parse_or(P))) return NULL;
        if (is_name(P, "else")) {
            adv(P);
            if (!(c->c = parse_expr(P, true))) return NULL;
        }
        x = c;
    }
    P->depth--;
    return x;
}

/* ---- statements ---- */

static bool parse_body(parser *P, jnodes *out, const char *const *ends, size_t n_ends, const char *what);

static bool block_end(parser *P) { return expect_type(P, T_BLOCK_END, "'%}'"); }

static bool add_target(parser *P, jnode *x, const char *s, size_t n) {
    if (x->n_targets % 8 == 0) {
        const char **nt = jmem_alloc(P->m, (x->n_targets + 8) * sizeof(char *));
        size_t *nl = jmem_alloc(P->m, (x->n_targets + 8) * sizeof(size_t));
        if (!nt || !nl) return poom(P);
        if (x->n_targets) {
            memcpy(nt, x->targets, x->n_targets * sizeof(char *));
            memcpy(nl, x->target_lens, x->n_targets * sizeof(size_t));
        }
        x->targets = nt;
        x->target_lens = nl;
    }
    x->targets[x->n_targets] = s;
    x->target_lens[x->n_targets] = n;
    x->n_targets++;
    return true;
}

/* name | name, name, ... | (name, name) */
static bool parse_targets(parser *P, jnode *x, bool allow_ns) {
    bool paren = is_op(P, "(");
    if (paren) adv(P);
    for (;;) {
        if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "a variable name");
        if (!add_target(P, x, cur(P)->s, cur(P)->n)) return false;
        adv(P);
        if (allow_ns && !paren && x->n_targets == 1 && is_op(P, ".")) {
            adv(P);
            if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "an attribute name");
            x->name = cur(P)->s;
            x->name_len = cur(P)->n;
            adv(P);
            return true;
        }
        if (!is_op(P, ",")) break;
        adv(P);
        if (paren && is_op(P, ")")) break;
    }
    return paren ? expect_op(P, ")") : true;
}

static jnode *parse_filter_chain(parser *P) {
    jnode *chain = NULL;
    do {
        int line = cur(P)->line;
        jnode *f = mk(P, N_FILTER, line);
        if (!f) return NULL;
        f->a = chain;
        if (!parse_dotted_name(P, &f->name, &f->name_len)) return NULL;
        if (is_op(P, "(") && !parse_call_args(P, &f->args, &f->kwargs)) return NULL;
        chain = f;
    } while (is_op(P, "|") && (adv(P), true));
    return chain;
}

static jnode *parse_if(parser *P, int line) {
    jnode *x = mk(P, N_IF, line);
    if (!x || !(x->a = parse_tuple(P, false, false, NULL)) || !block_end(P)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif"};
    if (!parse_body(P, &x->body, ends, 3, "endif")) return NULL;
    jtok *t = cur(P);
    adv(P);
    if (tok_is(t, T_NAME, "elif")) {
        jnode *e = parse_if(P, t->line);
        if (!e || !push(P, &x->else_body, e)) return NULL;
        return x;
    }
    if (tok_is(t, T_NAME, "else")) {
        static const char *const ends2[] = {"endif"};
        if (!block_end(P) || !parse_body(P, &x->else_body, ends2, 1, "endif")) return NULL;
        adv(P);
    }
    return block_end(P) ? x : NULL;
}

static jnode *parse_for(parser *P, int line) {
    jnode *x = mk(P, N_FOR, line);
    if (!x || !parse_targets(P, x, false)) return NULL;
    if (!is_name(P, "in")) return pfail(P, cur(P)->line, "%s", "expected 'in' in for statement"), NULL;
    adv(P);
    if (!(x->a = parse_tuple(P, false, false, "recursive"))) return NULL;
    if (is_name(P, "if")) {
        adv(P);
        if (!(x->b = parse_expr(P, true))) return NULL;
    }
    if (is_name(P, "recursive")) return pfail(P, cur(P)->line, "%s", "recursive loops are not supported"), NULL;
    if (!block_end(P)) return NULL;
    static const char *const ends[] = {"else", "endfor"};
    P->loop_depth++;
    if (!parse_body(P, &x->body, ends, 2, "endfor")) return NULL;
    P->loop_depth--;
    if (is_name(P, "else")) {
        adv(P);
        static const char *const ends2[] = {"endfor"};
        if (!block_end(P) || !parse_body(P, &x->else_body, ends2, 1, "endfor")) return NULL;
    }
    adv(P);
    return block_end(P) ? x : NULL;
}

static jnode *parse_set(parser *P, int line) {
    jnode *x = mk(P, N_SET, line);
    if (!x || !parse_targets(P, x, true)) return NULL;
    if (is_op(P, "=")) {
        adv(P);
        if (!(x->a = parse_tuple(P, true, false, NULL)) || !block_end(P)) return NULL;
        return x;
    }
    if (x->n_targets != 1 || x->name) return pfail(P, line, "%s", "block set needs a single variable name"), NULL;
    x->kind = N_SETBLOCK;
    if (is_op(P, "|")) {
        adv(P);
        if (!(x->c = parse_filter_chain(P))) return NULL;
    }
    static const char *const ends[] = {"endset"};
    if (!block_end(P) || !parse_body(P, &x->body, ends, 1, "endset")) return NULL;
    adv(P);
    return block_end(P) ? x : NULL;
}

static jnode *parse_macro(parser *P, int line) {
    jnode *x = mk(P, N_MACRO, line);
    if (!x) return NULL;
    if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "a macro name"), NULL;
    x->name = cur(P)->s;
    x->name_len = cur(P)->n;
    adv(P);
    if (!expect_op(P, "(")) return NULL;
    while (!is_op(P, ")")) {
        if (x->n_targets && !expect_op(P, ",")) return NULL;
        if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "a parameter name"), NULL;
        if (!add_target(P, x, cur(P)->s, cur(P)->n)) return NULL;
        adv(P);
        jnode *def = NULL;
        if (is_op(P, "=")) {
            adv(P);
            if (!(def = parse_expr(P, true))) return NULL;
        } else if (x->vals.n && x->vals.v[x->vals.n - 1]) {
            return pfail(P, cur(P)->line, "%s", "non-default parameter follows default parameter"), NULL;
        }
        if (!push(P, &x->vals, def)) return NULL;
    }
    adv(P);
    if (!block_end(P)) return NULL;
    int saved = P->loop_depth;
    P->loop_depth = 0;
    static const char *const ends[] = {"endmacro"};
    if (!parse_body(P, &x->body, ends, 1, "endmacro")) return NULL;
    P->loop_depth = saved;
    adv(P);
    return block_end(P) ? x : NULL;
}

static jnode *parse_simple_block(parser *P, jnode_kind kind, int line, const char *end) {
    jnode *x = mk(P, kind, line);
    if (!x) return NULL;
    if (kind == N_FILTERBLOCK && !(x->c = parse_filter_chain(P))) return NULL;
    if (kind == N_WITH) {
        while (cur(P)->type != T_BLOCK_END) {
            if (x->n_targets && !expect_op(P, ",")) return NULL;
            if (cur(P)->type != T_NAME) return expect_type(P, T_NAME, "a variable name"), NULL;
            if (!add_target(P, x, cur(P)->s, cur(P)->n)) return NULL;
            adv(P);
            if (!expect_op(P, "=")) return NULL;
            jnode *v = parse_expr(P, true);
            if (!v || !push(P, &x->args, v)) return NULL;
        }
    }
    const char *ends[] = {end};
    if (!block_end(P) || !parse_body(P, &x->body, ends, 1, end)) return NULL;
    adv(P);
    return block_end(P) ? x : NULL;
}

static jnode *parse_statement(parser *P) {
    jtok *t = cur(P);
    if (t->type != T_NAME) return expect_type(P, T_NAME, "a statement name"), NULL;
    int line = t->line;
    adv(P);
    if (!enter(P)) return NULL;
    jnode *x = NULL;
    if (tok_is(t, T_NAME, "if")) x = parse_if(P, line);
    else if (tok_is(t, T_NAME, "for")) x = parse_for(P, line);
    else if (tok_is(t, T_NAME, "set")) x = parse_set(P, line);
    else if (tok_is(t, T_NAME, "macro")) x = parse_macro(P, line);
    else if (tok_is(t, T_NAME, "filter")) x = parse_simple_block(P, N_FILTERBLOCK, line, "endfilter");
    else if (tok_is(t, T_NAME, "with")) x = parse_simple_block(P, N_WITH, line, "endwith");
    else if (tok_is(t, T_NAME, "generation")) x = parse_simple_block(P, N_BODY, line, "endgeneration");
    else if (tok_is(t, T_NAME, "break") || tok_is(t, T_NAME, "continue")) {
        if (P->loop_depth == 0) {
            pfail(P, line, "'%s' outside of a loop", t->s[0] == 'b' ? "break" : "continue");
            return NULL;
        }
        x = mk(P, t->s[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        if (x && !block_end(P)) x = NULL;
    } else {
        char name[48];
        snprintf(name, sizeof(name), "%.*s", (int)(t->n > 40 ? 40 : t->n), t->s);
        pfail(P, line, "unknown or unsupported tag '%s'", name);
    }
    P->depth--;
    return x;
}

static bool parse_body(parser *P, jnodes *out, const char *const *ends, size_t n_ends, const char *what) {
    for (;;) {
        jtok *t = cur(P);
        if (t->type == T_EOF) {
            if (n_ends) return pfail(P, t->line, "unexpected end of template, expected '%s'", what);
            return true;
        }
        if (t->type == T_DATA) {
            jnode *x = mk(P, N_DATA, t->line);
            if (!x) return false;
            x->value = jv_str(t->s, t->n);
            if (!push(P, out, x)) return false;
            adv(P);
        } else if (t->type == T_VAR_BEGIN) {
            adv(P);
            jnode *x = mk(P, N_OUTPUT, t->line);
            if (!x || !(x->a = parse_tuple(P, true, false, NULL))) return false;
            if (!expect_type(P, T_VAR_END, "'}}'") || !push(P, out, x)) return false;
        } else if (t->type == T_BLOCK_BEGIN) {
            jtok *name = peek(P, 1);
            for (size_t k = 0; k < n_ends; k++) {
                if (tok_is(name, T_NAME, ends[k])) {
                    adv(P);
                    return true;
                }
            }
            if (name->type == T_NAME && name->n > 3 && memcmp(name->s, "end", 3) == 0) {
                char buf[48];
                snprintf(buf, sizeof(buf), "%.*s", (int)(name->n > 40 ? 40 : name->n), name->s);
                return pfail(P, name->line, "unexpected tag '%s'", buf);
            }
            if (name->type == T_NAME && (tok_is(name, T_NAME, "else") || tok_is(name, T_NAME, "elif")))
                return pfail(P, name->line, "%s", "unexpected 'else'/'elif'");
            adv(P);
            jnode *x = parse_statement(P);
            if (!x || !push(P, out, x)) return false;
        } else {
            char b[64];
            return pfail(P, t->line, "unexpected %s", tok_desc(t, b, sizeof(b)));
        }
        if (P->failed) return false;
    }
}

rb_status jinja_parse(jtemplate *t, const char *src, size_t len, rb_error *err) {
    jmem_init(&t->mem, 0);
    t->root.n = 0;
    t->root.v = NULL;
    jtoks toks = {0};
    rb_status st = jinja_lex(&t->mem, src, len, &toks, err);
    if (st != RB_OK) {
        if (st == RB_E_NOMEM) rb_error_set(err, st, "out of memory while lexing chat template");
        return st;
    }
    parser P = {.m = &t->mem, .tk = toks.v, .n = toks.n, .err = err};
    if (!parse_body(&P, &t->root, NULL, 0, NULL)) return P.code ? P.code : RB_E_FORMAT;
    return RB_OK;
}

void jinja_template_release(jtemplate *t) { jmem_release(&t->mem); }
