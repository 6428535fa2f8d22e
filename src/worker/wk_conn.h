/* The transport's watch over its TCP connections, against clients that
 * hold connections without completing requests (slow-header attacks): every
 * connection's request head must be complete within --header-timeout, at
 * most --max-connections are open and at most --max-connections-per-client
 * come from one address. When a limit is reached, the connection that has
 * waited longest without finishing its request head makes room (a client
 * that sends its request promptly is never the one evicted); only when no
 * such connection exists is the new one refused. Connections also get TCP
 * keepalive, so a peer that vanished is noticed by the kernel even while no
 * reply is being written. */
#ifndef RBEE_WK_CONN_H
#define RBEE_WK_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct wk_conn wk_conn;

typedef struct wk_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wk_conn *first, *last; /* arrival order */
    int n;
    int max_total, max_per_client; /* 0: no per-client limit */
    double head_timeout_ms;
    double idle_grace_ms; /* a kept-alive connection's wait for its next request, before the head deadline */
    uint64_t evicted, head_timeouts, refused; /* counters, read under mu */
    pthread_t reaper;
    bool reaper_started, stop;
} wk_conns;

void wk_conns_init(wk_conns *c, int max_total, int max_per_client, double head_timeout_ms, double idle_grace_ms);
/* Starts the thread that closes connections past the head deadline. */
int wk_conns_start(wk_conns *c);
void wk_conns_destroy(wk_conns *c); /* stops the thread; connections must be closed */

/* A connection opened (fd, the peer's address as text); returns its
 * record (NULL when out of memory: then the connection is refused). May
 * evict another connection or refuse this one (shut down). */
wk_conn *wk_conns_open(wk_conns *c, int fd, const char *peer);
void wk_conns_close(wk_conns *c, wk_conn *k);
/* The current request's head is complete / the request is over (a
 * kept-alive connection may then idle for idle_grace_ms, plus the head
 * deadline, before its next request head must be complete). */
void wk_conns_head_done(wk_conns *c, wk_conn *k);
void wk_conns_request_done(wk_conns *c, wk_conn *k);

#endif
