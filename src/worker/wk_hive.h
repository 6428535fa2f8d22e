/* Talking to the hive over HTTP with libcurl, on a thread of its own so an
 * unreachable hive never blocks serving: periodic heartbeats to
 * {hive}/v1/worker-heartbeat (with timeouts and exponential backoff while it
 * fails), an immediate one on status changes, the one-shot ready callback,
 * and a final "stopping" heartbeat at shutdown. */
#ifndef RBEE_WK_HIVE_H
#define RBEE_WK_HIVE_H

#include "worker/wk_log.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct wk_hive_opts {
    const char *hive_url;     /* NULL: no heartbeats */
    const char *callback_url; /* NULL: no ready callback */
    const char *worker_id;
    const char *model_id;
    const char *device; /* "cpu:0", "cuda:0", ... */
    const char *version;
    const char *implementation; /* the worker's name: "llm-worker-rbee", ... */
    int port;
    int64_t interval_ms;
    const char *api_token; /* sent as a Bearer token when set */
} wk_hive_opts;

/* Current worker status for heartbeats: "starting", "ready", "busy". */
typedef const char *(*wk_hive_status_fn)(void *user);

typedef struct wk_hive wk_hive;

/* Starts the thread (copies opts' strings). out is NULL when neither a hive
 * nor a callback URL is given. */
int wk_hive_start(const wk_hive_opts *opts, wk_hive_status_fn status, void *user, wk_log *log, wk_hive **out);
/* The model is loaded: send the ready callback and a heartbeat now. */
void wk_hive_notify_ready(wk_hive *h);
/* Wakes the thread for an immediate heartbeat (status changed). */
void wk_hive_kick(wk_hive *h);
/* Sends the final "stopping" heartbeat (one try, short timeout), joins. */
void wk_hive_stop(wk_hive *h);

/* Delay before the next attempt after `failures` consecutive failures
 * (0: the regular interval). Exposed for tests. */
int64_t wk_hive_backoff_ms(int64_t interval_ms, int failures);

/* The heartbeat body: {"worker":{id, model_id, device, port, status,
 * implementation, version}, "timestamp": RFC 3339}. malloc'ed. */
char *wk_hive_heartbeat_json(const wk_hive_opts *o, const char *status);

#endif
