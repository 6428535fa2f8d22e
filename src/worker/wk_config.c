/* Implementation of wk_config.h: the common option table, environment
 * fallbacks, getopt_long over the combined tables, strict numbers, and
 * --help generated from the tables. */
#include "worker/wk_config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define N_COMMON 29

void wk_config_defaults(wk_config *c, const char *worker_name) {
    memset(c, 0, sizeof *c);
    c->worker_id = worker_name;
    c->backend = "cpu";
    c->queue_depth = 64;
    c->max_body_bytes = (int64_t)1 << 20;
    c->max_connections = 1000;
    c->max_per_client = 256;
    c->http_timeout_s = 60;
    c->header_timeout_s = 10;
    c->heartbeat_ms = 30000;
    c->job_ttl_ms = 60000;
    c->drain_timeout_ms = 30000;
    c->log_format = "text";
}

void wk_config_env_name(const char *flag, char *buf, size_t len) {
    size_t n = snprintf(buf, len, "RBEE_");
    for (const char *p = flag; *p && n + 1 < len; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    if (n < len) buf[n] = '\0';
}

/* The flags every worker has; cuda/rocm device numbers land in the two
 * temporaries and are folded into backend/device afterwards. */
static int common_opts(wk_config *c, int64_t *cuda_dev, int64_t *rocm_dev, const char *body_help, wk_opt *o) {
    const wk_opt t[N_COMMON] = {
        {"worker-id", WK_OPT_STRING, &c->worker_id, 0, 0, "ID", "worker id reported to the hive (default: the worker's name)"},
        {"model", WK_OPT_STRING, &c->model_path, 0, 0, "PATH", "model to serve (default: the bundled model)"},
        {"model-ref", WK_OPT_STRING, &c->model_ref, 0, 0, "REF", "model id reported to clients (default: from the path)"},
        {"port", WK_OPT_INT, &c->port, 0, 65535, "N", "TCP port, 0 = any free port (default 0)"},
        {"port-file", WK_OPT_STRING, &c->port_file, 0, 0, "PATH", "write the bound port to PATH once listening"},
        {"bind", WK_OPT_STRING, &c->bind_addr, 0, 0, "ADDR",
         "listen address, IPv4 or IPv6; :: listens on both (default 0.0.0.0, 127.0.0.1 with --local-mode)"},
        {"local-mode", WK_OPT_FLAG, &c->local_mode, 0, 0, NULL, "bind 127.0.0.1; an API token is optional"},
        {"tls-cert", WK_OPT_STRING, &c->tls_cert, 0, 0, "FILE", "serve HTTPS with this PEM certificate (with --tls-key)"},
        {"tls-key", WK_OPT_STRING, &c->tls_key, 0, 0, "FILE", "the PEM private key of --tls-cert"},
        {"cors-origin", WK_OPT_STRING, &c->cors_origin, 0, 0, "ORIGIN",
         "allow browsers from ORIGIN (or *, or a comma-separated list) to call the API (default: CORS off)"},
        {"hive-url", WK_OPT_STRING, &c->hive_url, 0, 0, "URL", "send heartbeats to URL/v1/worker-heartbeat"},
        {"callback-url", WK_OPT_STRING, &c->callback_url, 0, 0, "URL", "POST a ready callback once the model is loaded"},
        {"heartbeat-interval-ms", WK_OPT_INT, &c->heartbeat_ms, 10, 86400000, "N", "heartbeat interval (default 30000)"},
        {"backend", WK_OPT_STRING, &c->backend, 0, 0, "cpu|cuda|rocm", "compute backend (default cpu, or from the binary's name)"},
        {"device", WK_OPT_INT, &c->device, 0, 1023, "N", "device number of the backend (default 0)"},
        {"cuda-device", WK_OPT_INT, cuda_dev, 0, 1023, "N", "same as --backend cuda --device N"},
        {"rocm-device", WK_OPT_INT, rocm_dev, 0, 1023, "N", "same as --backend rocm --device N"},
        {"threads", WK_OPT_INT, &c->threads, 0, 1024, "N", "CPU threads (default 0: all cores)"},
        {"queue-depth", WK_OPT_INT, &c->queue_depth, 0, 1 << 20, "N", "waiting requests before 503 (default 64)"},
        {"max-body-bytes", WK_OPT_INT, &c->max_body_bytes, 1024, (int64_t)1 << 30, "N", body_help},
        {"max-connections", WK_OPT_INT, &c->max_connections, 4, 100000, "N", "open connections (default 1000)"},
        {"max-connections-per-client", WK_OPT_INT, &c->max_per_client, 0, 100000, "N",
         "open connections from one address, 0 = no limit (default 256)"},
        {"http-timeout", WK_OPT_INT, &c->http_timeout_s, 1, 86400, "S", "idle connection timeout in seconds (default 60)"},
        {"header-timeout", WK_OPT_INT, &c->header_timeout_s, 1, 3600, "S",
         "time a client has to send a complete request head (default 10)"},
        {"job-ttl-ms", WK_OPT_INT, &c->job_ttl_ms, 0, 86400000, "N", "keep finished jobs this long (default 60000)"},
        {"drain-timeout-ms", WK_OPT_INT, &c->drain_timeout_ms, 0, 86400000, "N",
         "SIGTERM grace for running requests (default 30000)"},
        {"no-warmup", WK_OPT_FLAG, &c->no_warmup, 0, 0, NULL, "skip the warm-up run after loading"},
        {"no-webui", WK_OPT_FLAG, &c->no_webui, 0, 0, NULL, "do not serve the built-in web page at /"},
        {"log-format", WK_OPT_STRING, &c->log_format, 0, 0, "text|json", "log lines as text or JSON (default text)"},
    };
    memcpy(o, t, sizeof t);
    return N_COMMON;
}

static bool parse_int(const char *name, const char *from, const wk_opt *o, const char *s) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < o->lo || v > o->hi) {
        fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", name, from, (long long)o->lo,
                (long long)o->hi, s);
        return false;
    }
    *(int64_t *)o->dst = v;
    return true;
}

static bool set_value(const char *name, const char *from, const wk_opt *o, const char *val) {
    switch (o->kind) {
    case WK_OPT_STRING: *(const char **)o->dst = val; return true;
    case WK_OPT_INT: return parse_int(name, from, o, val);
    case WK_OPT_FLAG:
        if (!val) {
            *(bool *)o->dst = true;
            return true;
        }
        if (!strcasecmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes") || !strcasecmp(val, "on")) {
            *(bool *)o->dst = true;
            return true;
        }
        if (!strcasecmp(val, "0") || !strcasecmp(val, "false") || !strcasecmp(val, "no") || !strcasecmp(val, "off")) {
            *(bool *)o->dst = false;
            return true;
        }
        fprintf(stderr, "%s: %s expects 1/0, true/false or yes/no, got '%s'\n", name, from, val);
        return false;
    }
    return false;
}

static void usage(FILE *f, const wk_config_info *in, const wk_opt *all, int n) {
    fprintf(f, "Usage: %s [options]\n", in->name); /* "Usage:" as GNU tools write it: help2man's synopsis */
    if (in->summary) fprintf(f, "%s\n", in->summary);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        if (i == N_COMMON) fprintf(f, "\n%s options:\n", in->name);
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", all[i].name, all[i].metavar ? " " : "",
                 all[i].metavar ? all[i].metavar : "");
        /* two spaces at least between a flag and its text, so help2man can split them */
        fprintf(f, "  %-26s%s%s\n", left, strlen(left) >= 26 ? "  " : " ", all[i].help);
    }
    fprintf(f, "  %-26s %s\n  %-26s %s\n", "--help", "this text", "--version", "print the version");
    fprintf(f,
            "\nEvery flag --some-flag may also be given as the environment variable RBEE_SOME_FLAG (the\n"
            "command line wins; flags without a value take 1/0). Environment only: RBEE_API_TOKEN (or\n"
            "LLORCH_API_TOKEN), the bearer token clients must send (required unless --local-mode);\n"
            "LLORCH_LOG_FORMAT=json is read like RBEE_LOG_FORMAT.\n");
    if (in->env_help) fprintf(f, "%s", in->env_help);
}

/* Whether the option called name was set by the environment or a flag. */
static bool was_given(const wk_opt *all, const bool *given, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(all[i].name, name) == 0) return given[i];
    return false;
}

static const char *alias_backend(const char *argv0) {
    const char *base = argv0 ? strrchr(argv0, '/') : NULL;
    base = base ? base + 1 : (argv0 ? argv0 : "");
    static const char *const kinds[] = {"cpu", "cuda", "rocm"};
    size_t bl = strlen(base);
    for (int i = 0; i < 3; i++) {
        size_t kl = strlen(kinds[i]);
        if (bl > kl + 1 && base[bl - kl - 1] == '-' && strcmp(base + bl - kl, kinds[i]) == 0) return kinds[i];
    }
    return NULL;
}

int wk_config_parse(wk_config *c, const wk_config_info *in, int argc, char **argv) {
    const int n = N_COMMON + (in->opts ? in->n_opts : 0);
    wk_opt *all = calloc((size_t)n, sizeof *all);
    struct option *lo = calloc((size_t)n + 3, sizeof *lo);
    bool *given = calloc((size_t)n, sizeof *given);
    int rc = 2;
    if (!all || !lo || !given) {
        fprintf(stderr, "%s: out of memory\n", in->name);
        goto out;
    }
    int64_t cuda_dev = -1, rocm_dev = -1;
    if (in->max_body_default > 0) c->max_body_bytes = in->max_body_default;
    char body_help[64];
    snprintf(body_help, sizeof body_help, "request body cap (default %lld)", (long long)c->max_body_bytes);
    common_opts(c, &cuda_dev, &rocm_dev, body_help, all);
    if (in->opts) memcpy(all + N_COMMON, in->opts, sizeof *all * (size_t)in->n_opts);
    const char *alias = alias_backend(argc > 0 ? argv[0] : NULL);
    if (alias) c->backend = alias;

    /* 1. the environment */
    for (int i = 0; i < n; i++) {
        char env[96];
        wk_config_env_name(all[i].name, env, sizeof env);
        const char *v = getenv(env);
        if (!v || !*v) continue;
        if (!set_value(in->name, env, &all[i], v)) goto out;
        given[i] = true;
    }
    /* 2. the command line */
    for (int i = 0; i < n; i++)
        lo[i] = (struct option){all[i].name, all[i].kind == WK_OPT_FLAG ? no_argument : required_argument, 0, 1000 + i};
    lo[n] = (struct option){"help", no_argument, 0, 1};
    lo[n + 1] = (struct option){"version", no_argument, 0, 2};
    optind = 1;
    opterr = 1;
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (o == 1) {
            usage(stdout, in, all, n);
            rc = 1;
            goto out;
        }
        if (o == 2) {
            printf("%s %s\n", in->name, in->version ? in->version : "");
            rc = 1;
            goto out;
        }
        if (o < 1000 || o >= 1000 + n) {
            usage(stderr, in, all, n);
            goto out;
        }
        char from[96];
        snprintf(from, sizeof from, "--%s", all[o - 1000].name);
        if (!set_value(in->name, from, &all[o - 1000], optarg)) goto out;
        given[o - 1000] = true;
    }
    if (optind != argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", in->name, argv[optind]);
        usage(stderr, in, all, n);
        goto out;
    }
    /* --cuda-device / --rocm-device pick the backend unless --backend was given. */
    if (cuda_dev >= 0 || rocm_dev >= 0) {
        c->device = cuda_dev >= 0 ? cuda_dev : rocm_dev;
        if (!was_given(all, given, n, "backend")) c->backend = cuda_dev >= 0 ? "cuda" : "rocm";
    }
    if (strcmp(c->backend, "cpu") != 0 && strcmp(c->backend, "cuda") != 0 && strcmp(c->backend, "rocm") != 0) {
        fprintf(stderr, "%s: --backend must be cpu, cuda or rocm, got '%s'\n", in->name, c->backend);
        goto out;
    }
    if (!was_given(all, given, n, "log-format")) { /* --log-format / RBEE_LOG_FORMAT absent: the legacy variable */
        const char *lf = getenv("LLORCH_LOG_FORMAT");
        if (lf && strcasecmp(lf, "json") == 0) c->log_format = "json";
    }
    if (strcasecmp(c->log_format, "json") == 0) c->log_json = true;
    else if (strcasecmp(c->log_format, "text") != 0) {
        fprintf(stderr, "%s: --log-format must be text or json, got '%s'\n", in->name, c->log_format);
        goto out;
    }
    if ((c->tls_cert != NULL) != (c->tls_key != NULL)) {
        fprintf(stderr, "%s: --tls-cert and --tls-key go together\n", in->name);
        goto out;
    }
    if (c->cors_origin && !*c->cors_origin) c->cors_origin = NULL;
    const char *tok = getenv("RBEE_API_TOKEN");
    if (!tok || !*tok) tok = getenv("LLORCH_API_TOKEN");
    c->api_token = tok && *tok ? tok : NULL;
    rc = 0;
out:
    free(all);
    free(lo);
    free(given);
    return rc;
}
