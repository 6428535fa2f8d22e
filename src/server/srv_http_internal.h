/* Internal to the HTTP layer: the per-request state kept between
 * libmicrohttpd's calls, reply helpers that also count the request in the
 * metrics, and the route handlers of the srv_routes_*.c files. */
#ifndef RBEE_SRV_HTTP_INTERNAL_H
#define RBEE_SRV_HTTP_INTERNAL_H

#include "server/srv_request.h"
#include "server/srv_worker.h"

#include <jansson.h>
#include <microhttpd.h>

typedef struct srv_req {
    srv_worker *w;
    srv_route route;
    char *body;
    size_t len, cap;
    bool too_big;
    char path_id[96]; /* {id} of /v1/jobs/{id}... */
} srv_req;

/* Queues a JSON reply (body consumed; NULL gives a 500) and counts it. */
enum MHD_Result srv_reply_json(struct MHD_Connection *c, srv_req *r, int status, json_t *body);
/* Same with one extra header (name NULL for none). */
enum MHD_Result srv_reply_json_hdr(struct MHD_Connection *c, srv_req *r, int status, json_t *body, const char *hname,
                                   const char *hval);
enum MHD_Result srv_reply_text(struct MHD_Connection *c, srv_req *r, int status, const char *ctype, char *text);
/* {"error":{"code","message","type"}} */
enum MHD_Result srv_reply_error(struct MHD_Connection *c, srv_req *r, int status, const char *code, const char *type,
                                const char *msg);
/* 400 with every field error: rbee shape, or OpenAI's for the /v1/completions family. */
enum MHD_Result srv_reply_invalid(struct MHD_Connection *c, srv_req *r, const srv_errors *errs, bool openai);
/* 503 + Retry-After for loading / queue full / shutting down. */
enum MHD_Result srv_reply_unavailable(struct MHD_Connection *c, srv_req *r, const char *code, const char *msg,
                                      bool openai);

/* 503 while loading or shutting down, 500 after a failed load. */
enum MHD_Result srv_reply_not_ready(struct MHD_Connection *c, srv_req *r, bool openai);

/* True when the peer has closed its side of the connection. */
bool srv_conn_closed(struct MHD_Connection *c);

/* JSON string from possibly-invalid UTF-8 (bad bytes become U+FFFD). */
json_t *srv_json_text(const char *s, size_t len);

/* Routes. */
enum MHD_Result srv_route_health(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_ready(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_info(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_metrics(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_models(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_jobs_create(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_job_get(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_job_stream(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_job_delete(struct MHD_Connection *c, srv_req *r);
enum MHD_Result srv_route_openai(struct MHD_Connection *c, srv_req *r, bool chat);

/* Streams a job as server-sent events in the job's API flavour (takes a
 * new reference to j). */
enum MHD_Result srv_stream_reply(struct MHD_Connection *c, srv_req *r, srv_job *j);

/* OpenAI objects (srv_openai_format.c). */
const char *srv_openai_finish_reason(rb_stop_reason why);
json_t *srv_openai_chunk(const srv_job *j, const char *model, const char *text, size_t len, const char *finish,
                         bool role_delta);
json_t *srv_openai_usage(const srv_job *j);
json_t *srv_openai_full(const srv_job *j, const char *model, const char *text, size_t len);
/* The id used in OpenAI objects for a job ("cmpl-..." / "chatcmpl-..."). */
const char *srv_openai_model_name(srv_worker *w, const srv_job *j);

#endif
