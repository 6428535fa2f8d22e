/* The worker's configuration: command-line flags, environment variables
 * (LLORCH_API_TOKEN, LLORCH_LOG_FORMAT) and the binary name (the -cpu,
 * -cuda and -rocm aliases preselect a backend), checked into one struct. */
#ifndef RBEE_SRV_CONFIG_H
#define RBEE_SRV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_config {
    const char *worker_id;
    const char *model_path;   /* NULL: the bundled default model */
    const char *model_ref;    /* id reported to clients; default derived from the path */
    const char *hive_url;     /* NULL: no heartbeats */
    const char *callback_url; /* NULL: no ready callback */
    const char *backend;      /* "cpu", "cuda", "rocm" */
    int device;               /* N of cuda:N / rocm:N */
    int threads;              /* CPU threads, <= 0: all */
    int port;                 /* 0: chosen by the OS */
    const char *port_file;    /* write the bound port here once listening */
    bool local_mode;          /* bind 127.0.0.1, allow no token */
    const char *bind_addr;    /* override of the listen address */
    int parallel;             /* concurrent sequences */
    int64_t ctx_size;         /* per-sequence context (0: min(model, 4096)) */
    int queue_depth;          /* waiting requests before 503 */
    size_t max_body_bytes;
    int max_connections;
    int http_timeout_s;       /* idle connection timeout */
    int64_t heartbeat_ms;
    int64_t job_ttl_ms;       /* finished jobs are removed after this */
    int64_t drain_timeout_ms; /* SIGTERM: finish running requests up to this */
    bool no_warmup;
    const char *api_token;    /* from LLORCH_API_TOKEN; NULL or "" = none */
    bool log_json;
} srv_config;

void srv_config_defaults(srv_config *c);

/* Parses argv (argv[0] selects the backend for the aliases). Returns 0 on
 * success, 1 if --help/--version was handled (exit 0), 2 on a usage error
 * (message already printed to stderr). Strings point into argv/environ. */
int srv_config_parse(srv_config *c, int argc, char **argv);

/* Resolves the default model: $RBEE_DEFAULT_MODEL, else the build's bundled
 * folder: rbee-default-q8_0.gguf when present, else its hf/ folder. Writes
 * the path into buf. Returns false if nothing exists. */
bool srv_default_model_path(char *buf, size_t len);

#endif
