/* Implementation of wk_hive.h. */
#include "worker/wk_hive.h"
#include "worker/wk_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct wk_hive {
    wk_hive_opts o;
    char *strs[8];
    wk_hive_status_fn status;
    void *user;
    wk_log *log;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, kick, ready_pending;
};

int64_t wk_hive_backoff_ms(int64_t interval_ms, int failures) {
    if (failures <= 0) return interval_ms;
    int64_t base = interval_ms < 500 ? interval_ms : 500;
    int64_t cap = interval_ms * 4;
    int64_t d = base;
    for (int i = 1; i < failures && d < cap; i++) d *= 2;
    return d < cap ? d : cap;
}

char *wk_hive_heartbeat_json(const wk_hive_opts *o, const char *status) {
    char ts[40];
    wk_rfc3339_now(ts, sizeof ts);
    json_t *j = json_pack("{s:{s:s,s:s,s:s,s:i,s:s,s:s,s:s},s:s}", "worker", "id", o->worker_id ? o->worker_id : "",
                          "model_id", o->model_id ? o->model_id : "", "device", o->device ? o->device : "cpu:0", "port",
                          o->port, "status", status, "implementation", o->implementation ? o->implementation : "", "version",
                          o->version ? o->version : "", "timestamp", ts);
    if (!j) return NULL;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static size_t discard(char *p, size_t sz, size_t n, void *u) {
    (void)p;
    (void)u;
    return sz * n;
}

/* POSTs body; returns the HTTP status (0 on a transport failure). */
static long post_json(wk_hive *h, const char *url, const char *body, long timeout_ms, char *why, size_t why_len) {
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(why, why_len, "curl_easy_init failed");
        return 0;
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[600];
    if (h->o.api_token && hdr) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->o.api_token);
        struct curl_slist *n = curl_slist_append(hdr, auth);
        if (n) hdr = n;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else snprintf(why, why_len, "%s", curl_easy_strerror(rc));
    if (rc == CURLE_OK && (code < 200 || code >= 300)) snprintf(why, why_len, "HTTP %ld", code);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    return code;
}

static bool send_heartbeat(wk_hive *h, const char *status, long timeout_ms) {
    char url[2048];
    snprintf(url, sizeof url, "%s/v1/worker-heartbeat", h->o.hive_url);
    char *body = wk_hive_heartbeat_json(&h->o, status);
    if (!body) return false;
    char why[256] = "";
    long code = post_json(h, url, body, timeout_ms, why, sizeof why);
    free(body);
    bool ok = code >= 200 && code < 300;
    if (!ok)
        wk_log_event(h->log, WK_LOG_WARN, "heartbeat_failed", json_pack("{s:s,s:s}", "url", url, "status", status),
                      "heartbeat to the hive failed: %s", why);
    return ok;
}

static bool send_ready_callback(wk_hive *h) {
    char url_self[64];
    snprintf(url_self, sizeof url_self, "http://127.0.0.1:%d", h->o.port);
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:s}", "worker_id", h->o.worker_id, "model_ref", h->o.model_id,
                          "status", "ready", "port", h->o.port, "device", h->o.device, "url", url_self,
                          "implementation", h->o.implementation ? h->o.implementation : "");
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body) return false;
    char why[256] = "";
    long code = post_json(h, h->o.callback_url, body, 5000, why, sizeof why);
    free(body);
    bool ok = code >= 200 && code < 300;
    if (ok) WK_INFO(h->log, "ready_callback", "ready callback sent to %s", h->o.callback_url);
    else WK_WARN(h->log, "ready_callback_failed", "ready callback to %s failed: %s", h->o.callback_url, why);
    return ok;
}

static void wait_ms(wk_hive *h, int64_t ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&h->mu);
    while (!h->stop && !h->kick) {
        if (pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT) break;
    }
    h->kick = false;
    pthread_mutex_unlock(&h->mu);
}

static void *hive_main(void *arg) {
    wk_hive *h = arg;
    int hb_fail = 0, cb_fail = 0;
    bool cb_done = h->o.callback_url == NULL;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        bool stop = h->stop, ready = h->ready_pending;
        pthread_mutex_unlock(&h->mu);
        if (stop) break;
        int64_t next = INT64_MAX;
        if (ready && !cb_done) {
            if (send_ready_callback(h)) cb_done = true;
            else if (++cb_fail >= 8) {
                WK_ERROR(h->log, "ready_callback_gave_up", "giving up on the ready callback after %d tries", cb_fail);
                cb_done = true;
            } else {
                next = wk_hive_backoff_ms(h->o.interval_ms < 2000 ? h->o.interval_ms : 2000, cb_fail);
            }
        }
        if (h->o.hive_url) {
            const char *st = h->status ? h->status(h->user) : "ready";
            if (send_heartbeat(h, st, 5000)) hb_fail = 0;
            else hb_fail++;
            int64_t d = wk_hive_backoff_ms(h->o.interval_ms, hb_fail);
            if (d < next) next = d;
        }
        if (next == INT64_MAX) next = h->o.interval_ms;
        wait_ms(h, next);
    }
    if (h->o.hive_url) send_heartbeat(h, "stopping", 2000);
    return NULL;
}

int wk_hive_start(const wk_hive_opts *opts, wk_hive_status_fn status, void *user, wk_log *log, wk_hive **out) {
    *out = NULL;
    if (!opts->hive_url && !opts->callback_url) return 0;
    wk_hive *h = calloc(1, sizeof *h);
    if (!h) return -1;
    h->o = *opts;
    const char **fields[] = {&h->o.hive_url, &h->o.callback_url, &h->o.worker_id, &h->o.model_id,
                             &h->o.device, &h->o.version, &h->o.api_token, &h->o.implementation};
    for (int i = 0; i < 8; i++) {
        if (!*fields[i]) continue;
        h->strs[i] = strdup(*fields[i]);
        if (!h->strs[i]) goto fail;
        *fields[i] = h->strs[i];
    }
    /* strip a trailing slash of the hive URL */
    if (h->strs[0]) {
        size_t n = strlen(h->strs[0]);
        while (n > 0 && h->strs[0][n - 1] == '/') h->strs[0][--n] = '\0';
    }
    h->status = status;
    h->user = user;
    h->log = log;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&h->th, NULL, hive_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        goto fail;
    }
    *out = h;
    return 0;
fail:
    for (int i = 0; i < 8; i++) free(h->strs[i]);
    free(h);
    return -1;
}

void wk_hive_notify_ready(wk_hive *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->ready_pending = true;
    h->kick = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void wk_hive_kick(wk_hive *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->kick = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void wk_hive_stop(wk_hive *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    for (int i = 0; i < 8; i++) free(h->strs[i]);
    free(h);
}
