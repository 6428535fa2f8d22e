/* The whole worker process as one object: configuration, logger, metrics,
 * job table, the loaded model and its inference engine, the HTTP daemon and
 * the hive client, plus the lifecycle (listen, load, warm up, serve, drain
 * on SIGTERM/SIGINT, exit). Route handlers reach everything through it. */
#ifndef RBEE_SRV_WORKER_H
#define RBEE_SRV_WORKER_H

#include "rbee/backend.h"
#include "rbee/model.h"
#include "rbee/tokenizer.h"
#include "server/srv_chat.h"
#include "server/srv_config.h"
#include "server/srv_engine.h"
#include "server/srv_hive.h"
#include "server/srv_jobs.h"
#include "server/srv_log.h"
#include "server/srv_metrics.h"

#include <pthread.h>
#include <stdatomic.h>

typedef enum srv_state { SRV_STATE_LOADING = 0, SRV_STATE_READY, SRV_STATE_ERROR, SRV_STATE_STOPPING } srv_state;

struct MHD_Daemon;

typedef struct srv_worker {
    srv_config cfg;
    srv_log log;
    srv_metrics metrics;
    srv_jobs jobs;
    atomic_int state;

    /* model: written once by the main thread before state becomes READY */
    rb_backend *be;
    rb_model *model;
    rb_tokenizer *tok;
    srv_chat chat;
    bool chat_ok;
    int64_t ctx_size;
    char model_path[4096];
    char model_id[512];
    char device[32];
    char load_error[512];

    /* engine: handlers use it under the read lock; shutdown takes it away */
    pthread_rwlock_t engine_lock;
    srv_engine *engine;

    struct MHD_Daemon *mhd;
    int port;
    srv_hive *hive;
} srv_worker;

/* Runs a worker until SIGTERM/SIGINT; returns the process exit code. */
int srv_worker_main(const srv_config *cfg);

/* Pieces of the lifecycle, also used by tests that run a worker in-process. */
rb_status srv_worker_init(srv_worker *w, const srv_config *cfg, rb_error *err);
rb_status srv_worker_load(srv_worker *w, rb_error *err); /* model, tokenizer, chat, engine */
void srv_worker_destroy(srv_worker *w);

/* "loading" | "idle" | "busy" | "error" | "stopping" */
const char *srv_worker_state_name(srv_worker *w);

/* Submits a job to the engine under the engine lock; RB_E_UNSUPPORTED if
 * no engine (loading / stopped). */
rb_status srv_worker_submit(srv_worker *w, srv_job *j);
void srv_worker_engine_stats(srv_worker *w, int *queued, int *active);
void srv_worker_poke(srv_worker *w);

#endif
