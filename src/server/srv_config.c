/* Implementation of srv_config.h: getopt_long parsing with strict numbers. */
#include "server/srv_config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef RBEE_DEFAULT_MODEL_DIR
#define RBEE_DEFAULT_MODEL_DIR "models/default"
#endif
#ifndef RBEE_VERSION
#define RBEE_VERSION "0.0.0"
#endif

void srv_config_defaults(srv_config *c) {
    memset(c, 0, sizeof *c);
    c->worker_id = "llm-worker-rbee";
    c->backend = "cpu";
    c->parallel = 4;
    c->queue_depth = 64;
    c->max_body_bytes = (size_t)1 << 20;
    c->max_connections = 1000;
    c->http_timeout_s = 60;
    c->heartbeat_ms = 30000;
    c->job_ttl_ms = 60000;
    c->drain_timeout_ms = 30000;
}

static bool parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "llm-worker-rbee: %s expects an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo,
                (long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: llm-worker-rbee [options]\n\n"
            "  --worker-id ID          worker id reported to the hive (default llm-worker-rbee)\n"
            "  --model PATH            GGUF file or Hugging Face folder (default: the bundled model)\n"
            "  --model-ref REF         model id reported to clients (default: from the path)\n"
            "  --port N                TCP port, 0 = any free port (default 0)\n"
            "  --port-file PATH        write the bound port to PATH once listening\n"
            "  --hive-url URL          send heartbeats to URL/v1/worker-heartbeat\n"
            "  --callback-url URL      POST a ready callback once the model is loaded\n"
            "  --backend cpu|cuda|rocm --device N  (also --cuda-device N / --rocm-device N)\n"
            "  --threads N             CPU threads (default: all cores)\n"
            "  --local-mode            bind 127.0.0.1; an API token is optional\n"
            "  --bind ADDR             listen address (default 0.0.0.0, 127.0.0.1 in local mode)\n"
            "  --parallel N            concurrent sequences (default 4)\n"
            "  --ctx-size N            context per sequence (default min(model, 4096))\n"
            "  --queue-depth N         waiting requests before 503 (default 64)\n"
            "  --max-body-bytes N      request body cap (default 1048576)\n"
            "  --max-connections N     (default 1000)\n"
            "  --http-timeout S        idle connection timeout in seconds (default 60)\n"
            "  --heartbeat-interval-ms N (default 30000)\n"
            "  --job-ttl-ms N          keep finished jobs this long (default 60000)\n"
            "  --drain-timeout-ms N    SIGTERM grace for running requests (default 30000)\n"
            "  --no-warmup\n\n"
            "Environment: LLORCH_API_TOKEN (required unless --local-mode), LLORCH_LOG_FORMAT=json,\n"
            "RBEE_DEFAULT_MODEL (overrides the bundled model path).\n");
}

enum {
    O_WORKER_ID = 1000, O_MODEL, O_MODEL_REF, O_PORT, O_PORT_FILE, O_HIVE, O_CALLBACK, O_BACKEND, O_DEVICE,
    O_CUDA_DEV, O_ROCM_DEV, O_THREADS, O_LOCAL, O_BIND, O_PARALLEL, O_CTX, O_QUEUE, O_MAX_BODY, O_MAX_CONN,
    O_HTTP_TIMEOUT, O_HEARTBEAT, O_JOB_TTL, O_DRAIN, O_NO_WARMUP, O_HELP, O_VERSION
};

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

int srv_config_parse(srv_config *c, int argc, char **argv) {
    static const struct option opts[] = {
        {"worker-id", required_argument, 0, O_WORKER_ID}, {"model", required_argument, 0, O_MODEL},
        {"model-ref", required_argument, 0, O_MODEL_REF}, {"port", required_argument, 0, O_PORT},
        {"port-file", required_argument, 0, O_PORT_FILE}, {"hive-url", required_argument, 0, O_HIVE},
        {"callback-url", required_argument, 0, O_CALLBACK}, {"backend", required_argument, 0, O_BACKEND},
        {"device", required_argument, 0, O_DEVICE},       {"cuda-device", required_argument, 0, O_CUDA_DEV},
        {"rocm-device", required_argument, 0, O_ROCM_DEV}, {"threads", required_argument, 0, O_THREADS},
        {"local-mode", no_argument, 0, O_LOCAL},          {"bind", required_argument, 0, O_BIND},
        {"parallel", required_argument, 0, O_PARALLEL},   {"ctx-size", required_argument, 0, O_CTX},
        {"queue-depth", required_argument, 0, O_QUEUE},   {"max-body-bytes", required_argument, 0, O_MAX_BODY},
        {"max-connections", required_argument, 0, O_MAX_CONN},
        {"http-timeout", required_argument, 0, O_HTTP_TIMEOUT},
        {"heartbeat-interval-ms", required_argument, 0, O_HEARTBEAT},
        {"job-ttl-ms", required_argument, 0, O_JOB_TTL},  {"drain-timeout-ms", required_argument, 0, O_DRAIN},
        {"no-warmup", no_argument, 0, O_NO_WARMUP},       {"help", no_argument, 0, O_HELP},
        {"version", no_argument, 0, O_VERSION},           {0, 0, 0, 0}};
    const char *alias = alias_backend(argc > 0 ? argv[0] : NULL);
    if (alias) c->backend = alias;
    bool backend_given = false;
    int64_t v = 0;
    int o;
    optind = 1;
    opterr = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case O_WORKER_ID: c->worker_id = optarg; break;
        case O_MODEL: c->model_path = optarg; break;
        case O_MODEL_REF: c->model_ref = optarg; break;
        case O_PORT: if (!parse_i64("--port", optarg, 0, 65535, &v)) return 2; c->port = (int)v; break;
        case O_PORT_FILE: c->port_file = optarg; break;
        case O_HIVE: c->hive_url = optarg; break;
        case O_CALLBACK: c->callback_url = optarg; break;
        case O_BACKEND: c->backend = optarg; backend_given = true; break;
        case O_DEVICE: if (!parse_i64("--device", optarg, 0, 1023, &v)) return 2; c->device = (int)v; break;
        case O_CUDA_DEV:
        case O_ROCM_DEV:
            if (!parse_i64(o == O_CUDA_DEV ? "--cuda-device" : "--rocm-device", optarg, 0, 1023, &v)) return 2;
            c->device = (int)v;
            if (!backend_given) c->backend = o == O_CUDA_DEV ? "cuda" : "rocm";
            break;
        case O_THREADS: if (!parse_i64("--threads", optarg, 0, 1024, &v)) return 2; c->threads = (int)v; break;
        case O_LOCAL: c->local_mode = true; break;
        case O_BIND: c->bind_addr = optarg; break;
        case O_PARALLEL: if (!parse_i64("--parallel", optarg, 1, 256, &v)) return 2; c->parallel = (int)v; break;
        case O_CTX: if (!parse_i64("--ctx-size", optarg, 8, 1 << 20, &v)) return 2; c->ctx_size = v; break;
        case O_QUEUE: if (!parse_i64("--queue-depth", optarg, 0, 1 << 20, &v)) return 2; c->queue_depth = (int)v; break;
        case O_MAX_BODY:
            if (!parse_i64("--max-body-bytes", optarg, 1024, (int64_t)1 << 30, &v)) return 2;
            c->max_body_bytes = (size_t)v;
            break;
        case O_MAX_CONN: if (!parse_i64("--max-connections", optarg, 4, 100000, &v)) return 2; c->max_connections = (int)v; break;
        case O_HTTP_TIMEOUT: if (!parse_i64("--http-timeout", optarg, 1, 86400, &v)) return 2; c->http_timeout_s = (int)v; break;
        case O_HEARTBEAT: if (!parse_i64("--heartbeat-interval-ms", optarg, 10, 86400000, &v)) return 2; c->heartbeat_ms = v; break;
        case O_JOB_TTL: if (!parse_i64("--job-ttl-ms", optarg, 0, 86400000, &v)) return 2; c->job_ttl_ms = v; break;
        case O_DRAIN: if (!parse_i64("--drain-timeout-ms", optarg, 0, 86400000, &v)) return 2; c->drain_timeout_ms = v; break;
        case O_NO_WARMUP: c->no_warmup = true; break;
        case O_HELP: usage(stdout); return 1;
        case O_VERSION: printf("llm-worker-rbee %s\n", RBEE_VERSION); return 1;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "llm-worker-rbee: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (strcmp(c->backend, "cpu") != 0 && strcmp(c->backend, "cuda") != 0 && strcmp(c->backend, "rocm") != 0) {
        fprintf(stderr, "llm-worker-rbee: --backend must be cpu, cuda or rocm, got '%s'\n", c->backend);
        return 2;
    }
    const char *tok = getenv("LLORCH_API_TOKEN");
    c->api_token = tok && *tok ? tok : NULL;
    return 0;
}

static bool exists(const char *p, bool dir) {
    struct stat st;
    return stat(p, &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

bool srv_default_model_path(char *buf, size_t len) {
    const char *env = getenv("RBEE_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return exists(env, false) || exists(env, true);
    }
    snprintf(buf, len, "%s/rbee-default-q8_0.gguf", RBEE_DEFAULT_MODEL_DIR);
    if (exists(buf, false)) return true;
    snprintf(buf, len, "%s/hf", RBEE_DEFAULT_MODEL_DIR);
    return exists(buf, true);
}
