/* The HTTP front of the worker on libmicrohttpd: one thread per connection
 * (so streams and long requests may block), request bodies collected up to
 * the cap, bearer-token auth, and dispatch to the route handlers. */
#ifndef RBEE_SRV_HTTP_H
#define RBEE_SRV_HTTP_H

#include "server/srv_worker.h"

/* Binds (port from the config, 0 = any) and starts serving; sets w->port. */
rb_status srv_http_start(srv_worker *w, rb_error *err);
/* Stops accepting new connections (existing ones go on). */
void srv_http_quiesce(srv_worker *w);
/* Number of open connections. */
unsigned srv_http_connections(srv_worker *w);
/* Closes everything and joins the connection threads. */
void srv_http_stop(srv_worker *w);

#endif
