/* Internal interface of the Jinja-subset interpreter behind chat templates:
 * the value model, the syntax tree, the lexer/parser entry points and the
 * render context shared by the evaluator, filters and methods. Values are
 * immutable (as under jinja2's ImmutableSandboxedEnvironment) except
 * namespace objects, and live in a per-render arena with a byte cap.
 * Strings and buffers carry the byte ranges whose text came from request
 * data (messages, tools, extra variables), so the caller can tell the
 * template's own text from the user's in the rendered output. */
#ifndef RBEE_CHAT_JINJA_H
#define RBEE_CHAT_JINJA_H

#include "rbee/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- memory: capped arena and growable byte buffer (jinja_mem.c) ---- */

typedef struct jmem_chunk jmem_chunk;
typedef struct jmem {
    jmem_chunk *head;
    size_t used;  /* bytes handed out, all chunks */
    size_t cap;   /* 0 = unlimited */
} jmem;

void jmem_init(jmem *m, size_t cap);
void *jmem_alloc(jmem *m, size_t n); /* zeroed, 16-aligned; NULL past cap or on OOM */
char *jmem_strdup(jmem *m, const char *s, size_t n); /* NUL-terminated copy */
void jmem_release(jmem *m);

/* A byte range [b, e). */
typedef struct jspan { size_t b, e; } jspan;

typedef struct jbuf {
    char *p;
    size_t n, cap;
    size_t limit; /* 0 = unlimited */
    bool failed;  /* an append hit the limit or OOM */
    bool over_limit;
    jspan *tr;    /* request-data ranges of p[0..n): sorted, disjoint, not adjacent */
    size_t tn, tcap;
} jbuf;

void jbuf_init(jbuf *b, size_t limit);
bool jbuf_put(jbuf *b, const char *s, size_t n);
bool jbuf_putc(jbuf *b, char c);
bool jbuf_puts(jbuf *b, const char *s);
void jbuf_free(jbuf *b); /* also its ranges */

/* ---- values (jinja_value.c) ---- */

typedef enum jv_type {
    JV_UNDEF = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* list or tuple (flag JV_F_TUPLE) */
    JV_DICT,
    JV_NS,    /* namespace(): the only mutable value */
    JV_FUNC,  /* builtin global, macro or bound method */
    JV_LOOP,  /* the `loop` object of a for statement */
} jv_type;

#define JV_F_TUPLE 1u
#define JV_F_REQ 2u /* none/bool/int/float that came from request data: printed as request text */

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_func jv_func;
typedef struct jv_loop jv_loop;

typedef struct jv {
    uint8_t type;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; const struct jtaint *t; } s; /* JV_STR; JV_UNDEF: name hint */
        jv_list *l;
        jv_dict *d;
        jv_func *fn;
        jv_loop *loop;
    } u;
} jv;

struct jv_list { size_t n; jv *v; };
struct jv_dict { size_t n, cap; jv *k; jv *v; };

typedef enum jfn_kind {
    JFN_RANGE, JFN_NAMESPACE, JFN_DICT, JFN_RAISE, JFN_STRFTIME,
    JFN_MACRO, JFN_METHOD,
} jfn_kind;

struct jframe;
struct jnode;
struct jv_func {
    jfn_kind kind;
    const struct jnode *macro; /* JFN_MACRO */
    struct jframe *closure;    /* JFN_MACRO */
    jv self;                   /* JFN_METHOD */
    const char *name;          /* JFN_METHOD: method name */
};

struct jv_loop {
    const jv *items;
    int64_t index0, length;
};

static inline jv jv_undef(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.type = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.type = JV_BOOL; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.type = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.type = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) {
    jv v = {0}; v.type = JV_STR; v.u.s.p = p; v.u.s.n = n; return v;
}
static inline jv jv_undef_named(const char *p, size_t n) {
    jv v = {0}; v.u.s.p = p; v.u.s.n = n; return v;
}
jv jv_cstr(const char *s);

/* ---- request-data ranges of strings (jinja_taint.c) ----
 * A string's t lists the byte ranges, relative to its start, whose text
 * came from request data: sorted, disjoint, not adjacent, and possibly
 * reaching past the string's end (read as clamped to it). NULL: none.
 * Every operation keeps the ranges of the bytes it copies; one that derives
 * new text from request text (case mapping, escaping, repr, JSON) marks the
 * derived bytes, per character where it can and else as a whole. */
typedef struct jtaint { size_t n; const jspan *r; } jtaint;
extern const jtaint jtaint_all; /* the whole string */

/* True if any byte of [b, e) is request data. */
bool jtaint_hit(const jtaint *t, size_t b, size_t e);
/* The same for queries whose b never decreases (linear over a string). */
typedef struct jtcur { const jtaint *t; size_t k; } jtcur;
bool jtcur_hit(jtcur *c, size_t b, size_t e);
/* Marks [from, to) of b as request data; false (b->failed) on OOM/limit.
 * to must not be below the end of a range marked before. */
bool jbuf_mark(jbuf *b, size_t from, size_t to);
/* Appends n bytes of s whose request ranges are t (relative to s). */
bool jbuf_put_t(jbuf *b, const char *s, size_t n, const jtaint *t);
/* Appends bytes [off, off + len) of string value s with their ranges. */
bool jbuf_put_sub(jbuf *b, jv s, size_t off, size_t len);

bool jv_truthy(jv v);
bool jv_is_num(jv v); /* int, float or bool */
double jv_num(jv v);
bool jv_equal(jv a, jv b);
const char *jv_type_name(jv v); /* Python-ish: 'str', 'int', 'dict', ... */

jv_list *jv_list_new(jmem *m, size_t n);
jv_dict *jv_dict_new(jmem *m, size_t cap);
/* Appends or replaces; false on OOM. Keys compared with jv_equal. */
bool jv_dict_set(jmem *m, jv_dict *d, jv k, jv v);
const jv *jv_dict_get(const jv_dict *d, jv k);
const jv *jv_dict_get_str(const jv_dict *d, const char *k, size_t n);

/* str() and repr() as Python prints them, appended to b with their request
 * ranges (a repr'ed string or a JV_F_REQ scalar as a whole). depth guards
 * against deep nesting (false + b->failed when exceeded). */
bool jv_write_str(jbuf *b, jv v);
bool jv_write_repr(jbuf *b, jv v, int depth);
void jv_format_float(double f, char out[32]); /* Python repr(float) */

/* UTF-8 helpers */
size_t utf8_len(const char *s, size_t n);              /* code points */
size_t utf8_next(const char *s, size_t n, size_t i);   /* byte index of the next code point */
uint32_t utf8_decode(const char *s, size_t n, size_t i, size_t *adv);
size_t utf8_encode(uint32_t cp, char out[4]);
/* Case conversion (jinja_case.c) of string value s, appended to b; each
 * character derived from a request character is request data. */
typedef enum jcase { JCASE_UPPER, JCASE_LOWER, JCASE_CAPITALIZE, JCASE_TITLE_PY, JCASE_TITLE_JINJA } jcase;
void jinja_case(jbuf *b, jv s, jcase mode);
/* Python str.isspace() for the code point starting at s[i]; *adv = its bytes. */
bool py_space_at(const char *s, size_t n, size_t i, size_t *adv);
/* Python str.isspace() for the code point ending just before s[end]. */
bool py_space_before(const char *s, size_t end, size_t *adv);

/* ---- syntax tree (jinja_parser.c) ---- */

typedef enum jnode_kind {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_BINOP, N_NOT, N_NEG, N_POS, N_AND, N_OR, N_COMPARE, N_COND, N_LIST,
    N_TUPLE, N_DICT, N_CONCAT,
    /* statements */
    N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK,
    N_CONTINUE, N_FILTERBLOCK, N_WITH, N_BODY,
} jnode_kind;

typedef enum jop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jop;

typedef struct jnode jnode;
typedef struct jnodes { size_t n; jnode **v; } jnodes;

struct jnode {
    jnode_kind kind;
    int line;
    jop op;
    const char *name; size_t name_len; /* NAME, GETATTR attr, FILTER/TEST name, SET/MACRO target */
    jv value;                          /* CONST; DATA text */
    jnode *a, *b, *c, *d;              /* operands / children (meaning per kind) */
    jnodes args;                       /* call/filter/test args, list items, dict keys, tuple */
    jnodes kwargs;                     /* keyword values (name in node->name of each kw node) */
    jnodes vals;                       /* dict values; compare operands; macro defaults */
    jop *ops;                          /* compare operators */
    jnodes body, else_body;            /* statements */
    const char **targets; size_t *target_lens; size_t n_targets; /* for/set/macro params */
    bool negate;                       /* TEST: is not */
};
/* Node field usage:
 *  GETATTR: a=obj, name           GETITEM: a=obj, b=key     SLICE: a=obj, b,c,d = start/stop/step
 *  CALL: a=callee, args, kwargs    FILTER: a=input (NULL in filter blocks), name, args, kwargs
 *  TEST: a=input, name, args       BINOP: a op b            AND/OR: a, b   NOT/NEG/POS: a
 *  COMPARE: a=first, vals=rest, ops    COND: a=then, b=cond, c=else (may be NULL)
 *  LIST/TUPLE: args   DICT: args=keys, vals=values   CONCAT: args
 *  OUTPUT: a   IF: a=cond, body, else_body   FOR: targets, a=iter, b=filter, body, else_body
 *  SET: targets (one: name; or several), a=value, name = namespace attr if set ns.attr (targets[0]=ns)
 *  SETBLOCK: targets[0], body, c = filter chain (FILTER with a=NULL, nested through a)
 *  MACRO: name, targets = params, vals = defaults (NULL entries), body
 *  FILTERBLOCK: c = filter chain, body   WITH: targets, args = values, body   BODY: body
 *  keyword arguments (kwargs entries): name = keyword, a = value expression */

typedef struct jtemplate {
    jmem mem;     /* owns every node and literal */
    jnodes root;
} jtemplate;

/* Parses src into t (t->mem initialised by the callee). Errors carry the
 * template line number; nesting of statements/expressions is bounded. */
rb_status jinja_parse(jtemplate *t, const char *src, size_t len, rb_error *err);
void jinja_template_release(jtemplate *t);

/* ---- lexer (jinja_lexer.c) ---- */

typedef enum jtok_type {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
} jtok_type;

typedef struct jtok {
    jtok_type type;
    int line;
    const char *s; size_t n; /* NAME/OP text; STRING/DATA decoded text (arena) */
    int64_t ival;
    double fval;
} jtok;

typedef struct jtoks { jtok *v; size_t n, cap; } jtoks;

rb_status jinja_lex(jmem *m, const char *src, size_t len, jtoks *out, rb_error *err);

/* ---- render context (jinja_eval.c) ---- */

typedef struct jvar { const char *name; size_t len; jv v; } jvar;

typedef struct jframe {
    struct jframe *parent;
    jvar inl[8];
    jvar *vars;
    size_t n, cap;
} jframe;

typedef struct jctx {
    jmem *mem;
    rb_error *err;
    jbuf *out;
    uint64_t steps, max_steps;
    unsigned depth, max_depth;
    size_t max_output;
    int64_t now; /* strftime_now clock, unix seconds */
    int line;    /* line of the node being evaluated, for messages */
    int loopctl; /* 0, 1 = break, 2 = continue */
    bool failed;
    rb_status failcode;
} jctx;

/* Renders the template; vars is the root frame (caller-filled). */
rb_status jinja_render(jctx *cx, const jtemplate *t, jframe *vars);

bool jframe_set(jctx *cx, jframe *f, const char *name, size_t len, jv v);
const jv *jframe_lookup(const jframe *f, const char *name, size_t len);

/* Records an error (first one wins) and returns false. */
bool jx_fail(jctx *cx, rb_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
bool jx_step(jctx *cx);
bool jx_oom(jctx *cx);
/* str(v) as a new string value in the arena. */
bool jx_to_str(jctx *cx, jv v, jv *out);
/* Wraps a finished jbuf into an arena string with its ranges (frees the buffer). */
bool jx_buf_to_str(jctx *cx, jbuf *b, jv *out);
/* Bytes [off, off + len) of string value s, its ranges cut to match. */
bool jx_substr(jctx *cx, jv s, size_t off, size_t len, jv *out);
/* Iteration snapshot of v (list items, dict keys, string characters). */
bool jx_iterate(jctx *cx, jv v, jv_list **out);
/* getattr / getitem with jinja2's rules. */
bool jx_getattr(jctx *cx, jv obj, const char *name, size_t n, jv *out);
bool jx_getitem(jctx *cx, jv obj, jv key, jv *out);
bool jx_call(jctx *cx, jv fn, const jv *args, size_t nargs, const char **kwn, const size_t *kwl,
             const jv *kwv, size_t nkw, jv *out);

/* Filters and tests (jinja_filters.c), methods and globals (jinja_methods.c). */
typedef struct jargs {
    const jv *pos; size_t npos;
    const char **kwn; const size_t *kwl; const jv *kwv; size_t nkw;
} jargs;
/* Argument i by position or keyword name; NULL if absent. */
const jv *jargs_get(const jargs *a, size_t i, const char *kw);

bool jinja_filter(jctx *cx, const char *name, size_t n, jv in, const jargs *a, jv *out);
bool jinja_test(jctx *cx, const char *name, size_t n, jv in, const jargs *a, bool *out);
bool jinja_method_exists(jv self, const char *name, size_t n);
bool jinja_method(jctx *cx, jv self, const char *name, size_t n, const jargs *a, jv *out);
bool jinja_global(const char *name, size_t n, jv *out, jmem *m);
bool jinja_call_builtin(jctx *cx, const jv_func *fn, const jargs *a, jv *out);

/* Arithmetic / comparison shared by the evaluator and filters. */
bool jx_binop(jctx *cx, jop op, jv a, jv b, jv *out);
bool jx_compare(jctx *cx, jop op, jv a, jv b, bool *out);

/* JSON (jinja_json.c): jansson value -> jv (with request set: every string,
 * key included, is request data and every scalar JV_F_REQ), and Python
 * json.dumps. */
bool jx_from_json(jctx *cx, const void *json, bool request, jv *out, int depth);
typedef struct jdump_opts {
    const char *indent; /* NULL = compact one-line */
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;
} jdump_opts;
bool jx_tojson(jctx *cx, jbuf *b, jv v, const jdump_opts *o, int depth);

#define JINJA_MAX_DEPTH_DATA 512

#endif
