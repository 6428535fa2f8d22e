/* One generation request travelling from an HTTP thread to the inference
 * thread and back: its validated parameters, the text pieces produced so
 * far, the final outcome, and a cancellation flag. Shared by reference
 * count between the job table, the scheduler and any stream readers; all
 * mutable fields are guarded by the job's own mutex. */
#ifndef RBEE_SRV_JOB_H
#define RBEE_SRV_JOB_H

#include "rbee/generate.h"
#include "rbee/sampler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_BYTES 100

typedef enum srv_api { SRV_API_RBEE = 0, SRV_API_COMPLETION, SRV_API_CHAT } srv_api;

typedef enum srv_job_state { SRV_JOB_QUEUED = 0, SRV_JOB_RUNNING, SRV_JOB_DONE, SRV_JOB_FAILED } srv_job_state;

/* Validated generation parameters (owned by the job once submitted). */
typedef struct srv_gen_request {
    int32_t *prompt; /* token ids, BOS included when the model wants one */
    size_t n_prompt;
    rb_sampler_params sampling;
    int64_t max_tokens;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage; /* OpenAI stream_options.include_usage */
    bool ignore_eos;    /* keep generating past end-of-sequence (benchmarks) */
    char *model;        /* model name as the client gave it (echoed back), may be NULL */
} srv_gen_request;

void srv_gen_request_free(srv_gen_request *r);

typedef struct srv_piece {
    char *text;
    size_t len;
} srv_piece;

typedef struct srv_job {
    char id[64];
    srv_api api;
    srv_gen_request req;
    int64_t created_unix;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    srv_job_state state;
    srv_piece *pieces;
    size_t n_pieces, cap_pieces;
    /* outcome (valid once state is DONE or FAILED) */
    rb_stop_reason stop_reason;
    int64_t tokens_out;
    double prefill_ms, decode_ms;
    char err_code[48];
    char err_msg[256];
    double finished_ms; /* monotonic time of completion */
    atomic_bool cancel;
} srv_job;

/* Takes ownership of *req (zeroed on return). NULL on allocation failure
 * (req is then freed). The new job has one reference. */
srv_job *srv_job_new(srv_api api, const char *id_prefix, srv_gen_request *req);
srv_job *srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);

/* Scheduler side. */
void srv_job_set_running(srv_job *j);
bool srv_job_push_piece(srv_job *j, const char *text, size_t len); /* false: out of memory */
void srv_job_finish(srv_job *j, rb_stop_reason why, int64_t tokens_out, double prefill_ms, double decode_ms);
void srv_job_fail(srv_job *j, const char *code, const char *msg);

/* Either side. */
void srv_job_request_cancel(srv_job *j);
bool srv_job_cancel_requested(const srv_job *j);
bool srv_job_is_finished(srv_job *j);

/* Waits up to timeout_ms for the job to change (new piece or state) beyond
 * what the caller has seen: n_seen pieces and state seen_state. Returns
 * immediately if there is something new. */
void srv_job_wait_change(srv_job *j, size_t n_seen, srv_job_state seen_state, int timeout_ms);

#endif
