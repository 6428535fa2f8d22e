/* A worker's configuration: the flags every rbee worker shares (identity,
 * model, listening, TLS, CORS, hive, limits, lifecycle), plus the worker's own
 * flags, described once in option tables from which the parser, the
 * environment-variable equivalents and --help are all derived. Every flag
 * --some-flag has the equivalent RBEE_SOME_FLAG; the command line wins. The
 * API token and the log format come from the environment (RBEE_API_TOKEN or
 * LLORCH_API_TOKEN; RBEE_LOG_FORMAT or LLORCH_LOG_FORMAT, or --log-format).
 * The binary's name may preselect the backend (NAME-cpu, -cuda, -rocm). */
#ifndef RBEE_WK_CONFIG_H
#define RBEE_WK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum wk_opt_kind {
    WK_OPT_STRING, /* const char **dst */
    WK_OPT_INT,    /* int64_t *dst, checked against [lo, hi] */
    WK_OPT_FLAG,   /* bool *dst; no argument (environment: 1/0, true/false, yes/no) */
} wk_opt_kind;

typedef struct wk_opt {
    const char *name; /* "ctx-size": --ctx-size, env RBEE_CTX_SIZE */
    wk_opt_kind kind;
    void *dst;
    int64_t lo, hi;      /* WK_OPT_INT */
    const char *metavar; /* "N", "PATH" (NULL for flags) */
    const char *help;    /* one line; the default is stated in it */
} wk_opt;

typedef struct wk_config {
    const char *worker_id;
    const char *model_path;   /* NULL: the worker's bundled default */
    const char *model_ref;    /* id reported to clients; default derived from the path */
    const char *hive_url;     /* NULL: no heartbeats */
    const char *callback_url; /* NULL: no ready callback */
    const char *backend;      /* "cpu", "cuda", "rocm" */
    int64_t device;           /* N of cuda:N / rocm:N */
    int64_t threads;          /* CPU threads, 0: all */
    int64_t port;             /* 0: chosen by the OS */
    const char *port_file;    /* write the bound port here once listening */
    bool local_mode;          /* bind 127.0.0.1, allow no token */
    const char *bind_addr;    /* listen address, IPv4 or IPv6 ("::" = dual stack) */
    const char *tls_cert;     /* PEM files; both or neither */
    const char *tls_key;
    const char *cors_origin;  /* NULL: CORS off; "*" or comma-separated origins */
    int64_t queue_depth;      /* waiting requests before 503 */
    int64_t max_body_bytes;
    int64_t max_connections;
    int64_t max_per_client;   /* open connections from one address (0: no limit) */
    int64_t http_timeout_s;   /* idle connection timeout */
    int64_t header_timeout_s; /* a request head must be complete this long after it began */
    int64_t heartbeat_ms;
    int64_t job_ttl_ms;       /* finished jobs are removed after this */
    int64_t drain_timeout_ms; /* SIGTERM: finish running requests up to this */
    bool no_warmup;
    bool no_webui;            /* leave the built-in web page out */
    const char *log_format;   /* "text" | "json" */
    const char *api_token;    /* from the environment; NULL = none */
    bool log_json;            /* derived from log_format */
} wk_config;

/* What the parser needs to know of the worker. */
typedef struct wk_config_info {
    const char *name;          /* "llm-worker-rbee": usage, messages, default worker id */
    const char *version;
    const char *summary;       /* one line under the usage line */
    const wk_opt *opts;        /* the worker's own flags (may be NULL) */
    int n_opts;
    const char *env_help;      /* extra environment lines for --help (may be NULL) */
    int64_t max_body_default;  /* --max-body-bytes default; 0: 1 MiB */
} wk_config_info;

void wk_config_defaults(wk_config *c, const char *worker_name);

/* Parses argv and the environment into c (and the worker's own options'
 * destinations). Returns 0 on success, 1 if --help/--version was handled
 * (exit 0), 2 on a usage error (message already printed to stderr).
 * Strings point into argv/environ. */
int wk_config_parse(wk_config *c, const wk_config_info *info, int argc, char **argv);

/* The environment variable of a flag: "ctx-size" -> "RBEE_CTX_SIZE". */
void wk_config_env_name(const char *flag, char *buf, size_t len);

#endif
