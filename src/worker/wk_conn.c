/* Implementation of wk_conn.h. A connection is closed from outside its
 * thread by shutting its socket down (libmicrohttpd then reads EOF and
 * closes it); the record stays until libmicrohttpd reports the close, and
 * every shutdown happens under the tracker's lock, so a descriptor is never
 * touched after its record is gone. */
#include "worker/wk_conn.h"
#include "worker/wk_util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct wk_conn {
    wk_conn *prev, *next;
    int fd;
    char peer[64];
    double head_start; /* monotonic ms the current request head began */
    bool head_done;
    bool shut; /* shut down by the tracker */
};

void wk_conns_init(wk_conns *c, int max_total, int max_per_client, double head_timeout_ms, double idle_grace_ms) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->max_total = max_total;
    c->max_per_client = max_per_client;
    c->head_timeout_ms = head_timeout_ms;
    c->idle_grace_ms = idle_grace_ms;
}

static void shut(wk_conn *k) {
    if (k->shut) return;
    k->shut = true;
    shutdown(k->fd, SHUT_RDWR);
}

static void *reaper_main(void *arg) {
    wk_conns *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += 200 * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L;
        dl.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
        const double now = wk_now_ms();
        for (wk_conn *k = c->first; k; k = k->next)
            if (!k->head_done && !k->shut && now - k->head_start > c->head_timeout_ms) {
                shut(k);
                c->head_timeouts++;
            }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int wk_conns_start(wk_conns *c) {
    if (pthread_create(&c->reaper, NULL, reaper_main, c) != 0) return -1;
    c->reaper_started = true;
    return 0;
}

void wk_conns_destroy(wk_conns *c) {
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->reaper_started) pthread_join(c->reaper, NULL);
    for (wk_conn *k = c->first; k;) {
        wk_conn *next = k->next;
        free(k);
        k = next;
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

/* The connection that has waited longest on its request head (of peer, or
 * of anyone when peer is NULL); NULL when none. Called with mu held. */
static wk_conn *oldest_stuck(wk_conns *c, const char *peer) {
    wk_conn *best = NULL;
    for (wk_conn *k = c->first; k; k = k->next)
        if (!k->head_done && !k->shut && (!peer || strcmp(k->peer, peer) == 0) &&
            (!best || k->head_start < best->head_start))
            best = k;
    return best;
}

static void keepalive(int fd) {
    int on = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

wk_conn *wk_conns_open(wk_conns *c, int fd, const char *peer) {
    wk_conn *k = calloc(1, sizeof *k);
    if (!k) {
        shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    k->fd = fd;
    snprintf(k->peer, sizeof k->peer, "%s", peer ? peer : "");
    k->head_start = wk_now_ms();
    keepalive(fd);
    pthread_mutex_lock(&c->mu);
    int same = 0, open = 0;
    for (wk_conn *o = c->first; o; o = o->next)
        if (!o->shut) {
            open++;
            same += strcmp(o->peer, k->peer) == 0;
        }
    if (c->max_per_client > 0 && same >= c->max_per_client) {
        wk_conn *v = oldest_stuck(c, k->peer);
        if (v) {
            shut(v);
            c->evicted++;
            open--;
        } else {
            shut(k);
            c->refused++;
        }
    }
    if (!k->shut && c->max_total > 0 && open >= c->max_total) {
        wk_conn *v = oldest_stuck(c, NULL);
        if (v) {
            shut(v);
            c->evicted++;
        } else {
            shut(k);
            c->refused++;
        }
    }
    k->prev = c->last;
    if (c->last) c->last->next = k;
    else c->first = k;
    c->last = k;
    c->n++;
    pthread_mutex_unlock(&c->mu);
    return k;
}

void wk_conns_close(wk_conns *c, wk_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    if (k->prev) k->prev->next = k->next;
    else c->first = k->next;
    if (k->next) k->next->prev = k->prev;
    else c->last = k->prev;
    c->n--;
    pthread_mutex_unlock(&c->mu);
    free(k);
}

void wk_conns_head_done(wk_conns *c, wk_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    k->head_done = true;
    pthread_mutex_unlock(&c->mu);
}

void wk_conns_request_done(wk_conns *c, wk_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    k->head_done = false;
    k->head_start = wk_now_ms() + c->idle_grace_ms;
    pthread_mutex_unlock(&c->mu);
}
