/* Public chat-template API: compiling a template, default variables, and
 * rendering a conversation with the variables transformers passes to chat
 * templates (messages, tools, documents, add_generation_prompt, special
 * tokens, extra keyword arguments) under the caller's limits, marking what
 * the request supplied (messages, tools, extra variables) as request data. */
#include "chat/chat_template.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEF_MAX_OUTPUT ((size_t)16 << 20)
#define DEF_MAX_MEMORY ((size_t)256 << 20)
#define DEF_MAX_STEPS 10000000ull
#define DEF_MAX_DEPTH 64u

rb_status rb_chat_template_parse(const char *src, size_t len, rb_chat_template **out, rb_error *err) {
    if (!out || (!src && len)) return rb_error_set(err, RB_E_INVALID, "chat template: NULL argument");
    *out = NULL;
    if (!src) src = "";
    if (len > ((size_t)64 << 20)) return rb_error_set(err, RB_E_RANGE, "chat template of %zu bytes is too large", len);
    rb_chat_template *t = calloc(1, sizeof(*t));
    if (!t) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    t->source = malloc(len + 1);
    t->defaults = json_object();
    if (!t->source || !t->defaults) {
        rb_chat_template_free(t);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    if (len) memcpy(t->source, src, len);
    t->source[len] = '\0';
    t->source_len = len;
    rb_status st = jinja_parse(&t->tpl, t->source, len, err);
    if (st != RB_OK) {
        rb_chat_template_free(t);
        return st;
    }
    *out = t;
    return RB_OK;
}

void rb_chat_template_free(rb_chat_template *t) {
    if (!t) return;
    jinja_template_release(&t->tpl);
    json_decref((json_t *)t->defaults);
    free(t->source);
    free(t);
}

const char *rb_chat_template_source(const rb_chat_template *t, size_t *len) {
    if (len) *len = t ? t->source_len : 0;
    return t ? t->source : NULL;
}

static rb_status set_value(rb_chat_template *t, const char *name, json_t *v, rb_error *err) {
    if (!t || !name || !*name) {
        json_decref(v);
        return rb_error_set(err, RB_E_INVALID, "chat template variable: NULL argument");
    }
    if (!v) {
        json_object_del((json_t *)t->defaults, name);
        return RB_OK;
    }
    if (json_object_set_new((json_t *)t->defaults, name, v) != 0)
        return rb_error_set(err, RB_E_NOMEM, "cannot store chat template variable '%s'", name);
    return RB_OK;
}

rb_status rb_chat_template_set_str(rb_chat_template *t, const char *name, const char *value, rb_error *err) {
    json_t *v = NULL;
    if (value) {
        v = json_string(value);
        if (!v) return rb_error_set(err, RB_E_FORMAT, "chat template variable '%s' is not valid UTF-8", name ? name : "");
    }
    return set_value(t, name, v, err);
}

rb_status rb_chat_template_set_json(rb_chat_template *t, const char *name, const char *value_json, rb_error *err) {
    json_t *v = NULL;
    if (value_json) {
        json_error_t je;
        v = json_loads(value_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) return rb_error_set(err, RB_E_FORMAT, "chat template variable '%s': bad JSON: %s", name ? name : "", je.text);
    }
    return set_value(t, name, v, err);
}

/* Sets every key of a JSON object as a variable of the root frame
 * (request: its values are request data). */
static bool set_json_vars(jctx *cx, jframe *root, const json_t *obj, bool request) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        size_t kn = strlen(key);
        char *k = jmem_strdup(cx->mem, key, kn);
        jv v = {0};
        if (!k) return jx_oom(cx);
        if (!jx_from_json(cx, val, request, &v, 0) || !jframe_set(cx, root, k, kn, v)) return false;
    }
    return true;
}

static rb_status parse_json_arg(const char *what, const char *text, json_type want, json_t **out, rb_error *err) {
    json_error_t je;
    *out = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!*out) return rb_error_set(err, RB_E_FORMAT, "%s: bad JSON at line %d: %s", what, je.line, je.text);
    if (json_typeof(*out) != want) {
        json_decref(*out);
        *out = NULL;
        return rb_error_set(err, RB_E_FORMAT, "%s: expected a JSON %s", what, want == JSON_ARRAY ? "array" : "object");
    }
    return RB_OK;
}

static const char V_MESSAGES[] = "messages", V_TOOLS[] = "tools", V_DOCUMENTS[] = "documents",
                  V_AGP[] = "add_generation_prompt";

/* Shared render path: messages come as a jv list built by the caller of
 * render() through the build callback, after defaults are in place. */
typedef bool (*build_messages_fn)(jctx *cx, const void *arg, jv *out);

static rb_status render(const rb_chat_template *t, build_messages_fn build, const void *arg,
                        const rb_chat_options *opts, rb_chat_rendered *out, rb_error *err) {
    if (!t || !out) return rb_error_set(err, RB_E_INVALID, "chat template render: NULL argument");
    memset(out, 0, sizeof *out);
    rb_chat_options def = {0};
    if (!opts) opts = &def;
    json_t *tools = NULL, *extra = NULL;
    rb_status st;
    if (opts->tools_json && (st = parse_json_arg("tools", opts->tools_json, JSON_ARRAY, &tools, err)) != RB_OK)
        return st;
    if (opts->extra_vars_json &&
        (st = parse_json_arg("extra variables", opts->extra_vars_json, JSON_OBJECT, &extra, err)) != RB_OK) {
        json_decref(tools);
        return st;
    }
    jmem mem;
    jmem_init(&mem, opts->limits.max_memory_bytes ? opts->limits.max_memory_bytes : DEF_MAX_MEMORY);
    jbuf buf;
    size_t max_out = opts->limits.max_output_bytes ? opts->limits.max_output_bytes : DEF_MAX_OUTPUT;
    jbuf_init(&buf, max_out);
    jctx cx = {
        .mem = &mem,
        .err = err,
        .out = &buf,
        .max_steps = opts->limits.max_steps ? opts->limits.max_steps : DEF_MAX_STEPS,
        .max_depth = opts->limits.max_depth ? opts->limits.max_depth : DEF_MAX_DEPTH,
        .max_output = max_out,
        .now = opts->now ? opts->now : (int64_t)time(NULL),
        .line = 0,
    };
    jframe root = {0};
    jv msgs = {0}, tv = jv_none();
    bool ok = set_json_vars(&cx, &root, (const json_t *)t->defaults, false) && build(&cx, arg, &msgs) &&
              jframe_set(&cx, &root, V_MESSAGES, sizeof(V_MESSAGES) - 1, msgs) &&
              (!tools || jx_from_json(&cx, tools, true, &tv, 0)) &&
              jframe_set(&cx, &root, V_TOOLS, sizeof(V_TOOLS) - 1, tv) &&
              jframe_set(&cx, &root, V_DOCUMENTS, sizeof(V_DOCUMENTS) - 1, jv_none()) &&
              jframe_set(&cx, &root, V_AGP, sizeof(V_AGP) - 1, jv_bool(opts->add_generation_prompt)) &&
              (!extra || set_json_vars(&cx, &root, extra, true));
    json_decref(tools);
    json_decref(extra);
    if (!ok) {
        st = cx.failcode ? cx.failcode : RB_E_INVALID;
        rb_error_prefix(err, "preparing chat template variables: ");
    } else {
        st = jinja_render(&cx, &t->tpl, &root);
    }
    jmem_release(&mem);
    if (st != RB_OK) {
        jbuf_free(&buf);
        return st;
    }
    if (!buf.p) { /* empty output still gets a buffer */
        buf.p = malloc(1);
        if (!buf.p) {
            jbuf_free(&buf);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        buf.p[0] = '\0';
    }
    if (buf.tn) {
        out->request = malloc(buf.tn * sizeof *out->request);
        if (!out->request) {
            jbuf_free(&buf);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        for (size_t i = 0; i < buf.tn; i++) {
            out->request[i].begin = buf.tr[i].b;
            out->request[i].end = buf.tr[i].e;
        }
        out->n_request = buf.tn;
    }
    free(buf.tr);
    out->text = buf.p;
    out->len = buf.n;
    return RB_OK;
}

void rb_chat_rendered_free(rb_chat_rendered *r) {
    if (!r) return;
    free(r->text);
    free(r->request);
    memset(r, 0, sizeof *r);
}

/* The text of a render alone, for the apply entry points. */
static rb_status text_only(rb_status st, rb_chat_rendered *r, char **out, size_t *out_len) {
    if (out) *out = st == RB_OK ? r->text : NULL;
    if (out_len) *out_len = st == RB_OK ? r->len : 0;
    free(r->request);
    return st;
}

typedef struct msg_array { const rb_chat_message *m; size_t n; } msg_array;

static const char K_ROLE[] = "role", K_CONTENT[] = "content";

static bool build_from_array(jctx *cx, const void *arg, jv *out) {
    const msg_array *ma = arg;
    jv_list *l = jv_list_new(cx->mem, ma->n);
    if (!l) return jx_oom(cx);
    for (size_t i = 0; i < ma->n; i++) {
        const rb_chat_message *m = &ma->m[i];
        if (!m->role) return jx_fail(cx, RB_E_INVALID, "message %zu has no role", i);
        jv_dict *d = jv_dict_new(cx->mem, 2);
        if (!d) return jx_oom(cx);
        d->k[0] = jv_str(K_ROLE, 4);
        d->v[0] = jv_cstr(m->role);
        d->v[0].u.s.t = &jtaint_all;
        d->k[1] = jv_str(K_CONTENT, 7);
        d->v[1] = m->content ? jv_cstr(m->content) : jv_none();
        if (m->content) d->v[1].u.s.t = &jtaint_all;
        else d->v[1].flags = JV_F_REQ;
        d->n = 2;
        l->v[i].type = JV_DICT;
        l->v[i].u.d = d;
    }
    out->type = JV_LIST;
    out->flags = 0;
    out->u.l = l;
    return true;
}

rb_status rb_chat_template_render(const rb_chat_template *t, const rb_chat_message *msgs, size_t n_msgs,
                                  const rb_chat_options *opts, rb_chat_rendered *out, rb_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!msgs && n_msgs) return rb_error_set(err, RB_E_INVALID, "chat template render: NULL messages");
    msg_array ma = {msgs, n_msgs};
    return render(t, build_from_array, &ma, opts, out, err);
}

static bool build_from_json(jctx *cx, const void *arg, jv *out) { return jx_from_json(cx, arg, true, out, 0); }

rb_status rb_chat_template_render_json(const rb_chat_template *t, const char *messages_json,
                                       const rb_chat_options *opts, rb_chat_rendered *out, rb_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!messages_json) return rb_error_set(err, RB_E_INVALID, "chat template render: NULL messages");
    json_t *m;
    rb_status st = parse_json_arg("messages", messages_json, JSON_ARRAY, &m, err);
    if (st != RB_OK) return st;
    st = render(t, build_from_json, m, opts, out, err);
    json_decref(m);
    return st;
}

rb_status rb_chat_template_apply(const rb_chat_template *t, const rb_chat_message *msgs, size_t n_msgs,
                                 const rb_chat_options *opts, char **out, size_t *out_len, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "chat template render: NULL argument");
    rb_chat_rendered r;
    return text_only(rb_chat_template_render(t, msgs, n_msgs, opts, &r, err), &r, out, out_len);
}

rb_status rb_chat_template_apply_json(const rb_chat_template *t, const char *messages_json,
                                      const rb_chat_options *opts, char **out, size_t *out_len, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "chat template render: NULL argument");
    rb_chat_rendered r;
    return text_only(rb_chat_template_render_json(t, messages_json, opts, &r, err), &r, out, out_len);
}
