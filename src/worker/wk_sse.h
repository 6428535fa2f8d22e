/* A job's events streamed as server-sent events: each payload a
 * "data: <json>" block, the stream closed by "data: [DONE]" after the job's
 * end or error. By default each event is sent as its own JSON object (the
 * rbee job stream); a worker may pass a flavour that formats events in
 * another API's shape (OpenAI chunks). A client that goes away mid-stream
 * cancels the job. */
#ifndef RBEE_WK_SSE_H
#define RBEE_WK_SSE_H

#include "worker/wk_job.h"
#include "worker/wk_req.h"

typedef struct wk_sse_out wk_sse_out;

/* Appends "data: <obj>\n\n" (obj consumed; NULL marks the stream broken). */
void wk_sse_put(wk_sse_out *o, json_t *obj);

typedef struct wk_sse_flavor {
    /* Formats event e with wk_sse_put (zero or more payloads). Called in
     * event order with the job's mutex held. */
    void (*event)(void *ctx, const wk_job *j, const wk_event *e, wk_sse_out *o);
    void (*free_ctx)(void *ctx);
} wk_sse_flavor;

/* Replies to r with the stream of j (takes its own reference). fl NULL:
 * the rbee stream; ctx is handed to fl's functions and freed with free_ctx
 * when the stream ends (also when this call fails). */
bool wk_sse_reply(wk_req *r, wk_job *j, const wk_sse_flavor *fl, void *ctx);

#endif
