/* libFuzzer target: HTTP requests to llm-worker-rbee as bytes, without a
 * socket. Input framing:
 *   METHOD SP URL LF  (NAME ":" VALUE LF)*  LF  BODY
 * The head goes through the worker's dispatch (method syntax, framing
 * headers, CORS, the router with the worker's routes, bearer auth, 405,
 * the body cap) twice: with a token and an origin list, and in local mode
 * with CORS "*". A POST that reaches a generation route has its body
 * parsed and validated as the route does (fields, refused OpenAI fields,
 * the chat template over its messages, tokenization into a small context,
 * n / logprobs / logit_bias / stop within their bounds; an embeddings body
 * into token lists that fit) with a small ChatML tokenizer, and the errors
 * are written in both shapes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/wk_dispatch.h"
#include "worker_llm/llm_embed.h"
#include "worker_llm/llm_prompt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The two symbols the instrumented objects name but this path never calls:
 * the static-file reply (the libmicrohttpd transport, not linked) and the
 * stop-reason name (the generation runtime, not linked). */
bool wk_reply_static(wk_req *r, int status, const char *ctype, const void *data, size_t len);
bool wk_reply_static(wk_req *r, int status, const char *ctype, const void *data, size_t len) {
    (void)r, (void)status, (void)ctype, (void)data, (void)len;
    abort();
}
const char *rb_stop_reason_name(rb_stop_reason r) {
    (void)r;
    abort();
}

#define MAX_HEADERS 32

typedef struct fz_req {
    char *method, *url;
    char *names[MAX_HEADERS], *values[MAX_HEADERS];
    int n;
    const char *body;
    size_t body_len;
} fz_req;

static const char *fz_header(void *ctx, const char *name) {
    const fz_req *q = ctx;
    for (int i = 0; i < q->n; i++)
        if (strcasecmp(q->names[i], name) == 0) return q->values[i];
    return NULL;
}

static void fz_each(void *ctx, wk_header_fn fn, void *acc) {
    const fz_req *q = ctx;
    for (int i = 0; i < q->n; i++) fn(acc, q->names[i], strlen(q->names[i]), q->values[i], strlen(q->values[i]));
}

/* Splits buf (NUL-terminated copy of the input, modified in place). */
static void frame(char *buf, size_t size, fz_req *q) {
    memset(q, 0, sizeof *q);
    char *end = buf + size, *p = buf;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *line_end = nl ? nl : end;
    *line_end = '\0';
    q->method = p;
    char *sp = strchr(p, ' ');
    q->url = sp ? (*sp = '\0', sp + 1) : (char *)"/";
    p = nl ? nl + 1 : end;
    while (p < end && *p != '\n' && q->n < MAX_HEADERS) {
        nl = memchr(p, '\n', (size_t)(end - p));
        line_end = nl ? nl : end;
        *line_end = '\0';
        char *colon = strchr(p, ':');
        if (colon) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ') v++;
            q->names[q->n] = p;
            q->values[q->n] = v;
            q->n++;
        }
        p = nl ? nl + 1 : end;
    }
    if (p < end && *p == '\n') p++;
    q->body = p < end ? p : "";
    q->body_len = p < end ? (size_t)(end - p) : 0;
}

static bool stub(wk_req *r, void *ctx) {
    (void)r;
    (void)ctx;
    return true;
}

/* The routes of llm-worker-rbee (wk_routes_info.c, wk_routes_jobs.c, llm_routes_*.c). */
static bool add_routes(wk_router *rt) {
    static const struct { const char *m, *p, *label; unsigned flags; } routes[] = {
        {"GET", "/health", NULL, WK_ROUTE_PUBLIC},
        {"GET", "/v1/health", "/health", WK_ROUTE_PUBLIC},
        {"GET", "/v1/ready", NULL, 0},
        {"GET", "/v1/info", NULL, 0},
        {"GET", "/metrics", NULL, 0},
        {"GET", "/v1/jobs/{id}", NULL, 0},
        {"GET", "/v1/jobs/{id}/stream", NULL, 0},
        {"DELETE", "/v1/jobs/{id}", "DELETE /v1/jobs/{id}", 0},
        {"POST", "/v1/jobs", NULL, 0},
        {"POST", "/v1/inference", NULL, 0},
        {"GET", "/v1/models", NULL, WK_ROUTE_OPENAI},
        {"POST", "/v1/completions", NULL, WK_ROUTE_OPENAI},
        {"POST", "/v1/chat/completions", NULL, WK_ROUTE_OPENAI},
        {"POST", "/v1/embeddings", NULL, WK_ROUTE_OPENAI},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (wk_router_add(rt, routes[i].m, routes[i].p, stub, NULL, routes[i].label, routes[i].flags, NULL) != RB_OK)
            return false;
    return true;
}

/* A ChatML tokenizer: letters, digits, space, newline and a few signs,
 * <unk> for the rest, two merges, <|im_start|> / <|im_end|> special. */
static rb_tokenizer *small_tokenizer(void) {
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:!?<>|_-";
    char json[4096];
    size_t o = (size_t)snprintf(json, sizeof json, "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\","
                                                    "\"vocab\":{\"<unk>\":0,\"\\n\":1,");
    for (size_t i = 0; chars[i]; i++) o += (size_t)snprintf(json + o, sizeof json - o, "\"%c\":%zu,", chars[i], i + 2);
    o += (size_t)snprintf(json + o, sizeof json - o,
                          "\"th\":200,\"the\":201},\"merges\":[\"t h\",\"th e\"]},"
                          "\"added_tokens\":[{\"id\":202,\"content\":\"<|im_start|>\",\"special\":true},"
                          "{\"id\":203,\"content\":\"<|im_end|>\",\"special\":true}]}");
    static const char cfg[] =
        "{\"eos_token\":\"<|im_end|>\",\"chat_template\":\"{% for m in messages %}{{ '<|im_start|>' + m['role'] + "
        "'\\\\n' + m['content'] | trim + '<|im_end|>\\\\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\\\n' }}{% endif %}\"}";
    rb_tokenizer *t = NULL;
    if (rb_tokenizer_load_hf_memory(json, o, cfg, sizeof cfg - 1, &t, NULL) != RB_OK) abort();
    return t;
}

/* An embeddings body that passes has 1..ctx tokens per input, all in the vocabulary. */
static void validate_embed(json_t *body, rb_tokenizer *tok, wk_errors *errs) {
    const llm_embed_ctx c = {.tok = tok, .ctx_size = 64, .n_vocab = rb_tokenizer_n_vocab(tok), .n_embd = 8,
                             .pooling = LLM_POOL_MEAN};
    llm_embed_request er;
    const char *model = NULL;
    llm_embed_read(&c, body, &er, &model, errs);
    if (errs->n == 0) {
        if (er.n_inputs == 0) abort();
        for (size_t i = 0; i < er.n_inputs; i++) {
            const size_t n = er.offs[i + 1] - er.offs[i];
            if (n < 1 || n > 64) abort();
            for (size_t k = er.offs[i]; k < er.offs[i + 1]; k++)
                if (er.tokens[k] < 0 || er.tokens[k] >= c.n_vocab) abort();
        }
    }
    llm_embed_request_free(&er);
}

static void validate(const fz_req *q, const wk_route *route) {
    llm_api api;
    if (strcmp(route->pattern, "/v1/chat/completions") == 0) api = LLM_API_CHAT;
    else if (strcmp(route->pattern, "/v1/embeddings") == 0) api = LLM_API_EMBED;
    else if (strcmp(route->pattern, "/v1/completions") == 0) api = LLM_API_COMPLETION;
    else if (strcmp(route->pattern, "/v1/jobs") == 0 || strcmp(route->pattern, "/v1/inference") == 0) api = LLM_API_RBEE;
    else return;
    wk_errors errs = {.n = 0};
    json_t *body = wk_parse_body(q->body, q->body_len, &errs);
    if (body && api == LLM_API_EMBED) {
        rb_tokenizer *tok = small_tokenizer();
        validate_embed(body, tok, &errs);
        rb_tokenizer_free(tok);
        json_decref(body);
    } else if (body) {
        rb_tokenizer *tok = small_tokenizer();
        llm_chat chat;
        if (llm_chat_init(&chat, tok, NULL) != RB_OK) abort();
        llm_gen_request req;
        memset(&req, 0, sizeof req);
        const llm_prompt_ctx pc = {.tok = tok, .chat = &chat, .ctx_size = 64,
                                   .lim = {.n_vocab = rb_tokenizer_n_vocab(tok), .max_choices = 4}};
        llm_prompt_build(&pc, body, api, &req, &errs);
        if (errs.n == 0 && (!req.prompt || req.n_prompt == 0 || req.max_tokens < 1 ||
                            (int64_t)req.n_prompt + req.max_tokens > 64))
            abort(); /* a request that passes fits the context */
        if (errs.n == 0 && (llm_gen_choices(&req) > 4 || req.top_logprobs < 0 || req.top_logprobs > 20 ||
                            req.n_stop > LLM_MAX_STOP || req.sampling.n_logit_bias > LLM_MAX_LOGIT_BIAS))
            abort(); /* and keeps the bounds */
        for (size_t i = 0; errs.n == 0 && i < req.sampling.n_logit_bias; i++)
            if (req.bias[i].token < 0 || req.bias[i].token >= pc.lim.n_vocab || !(req.bias[i].bias >= -100.0f) ||
                !(req.bias[i].bias <= 100.0f))
                abort();
        llm_gen_request_free(&req);
        llm_chat_destroy(&chat);
        rb_tokenizer_free(tok);
        json_decref(body);
    }
    json_decref(wk_errors_json(&errs));
    json_decref(wk_errors_openai_json(&errs));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    fz_req q;
    frame(buf, size, &q);
    wk_router rt;
    wk_router_init(&rt);
    if (!add_routes(&rt)) abort();
    wk_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_body_bytes = 4096;
    for (int mode = 0; mode < 2; mode++) {
        cfg.api_token = mode == 0 ? "secret-token" : NULL;
        cfg.cors_origin = mode == 0 ? "https://a.example, https://b.example" : "*";
        wk_head h = {.method = q.method, .url = q.url, .ctx = &q, .header = fz_header, .each = fz_each};
        wk_dispatch d;
        wk_dispatch_head(&cfg, &rt, &h, &d);
        if (d.verdict == WK_UNAUTHORIZED && !d.code) abort();
        if (d.verdict == WK_GO && d.route && strcmp(q.method, "POST") == 0 && q.body_len <= (size_t)cfg.max_body_bytes)
            validate(&q, d.route);
    }
    wk_router_destroy(&rt);
    free(buf);
    return 0;
}
