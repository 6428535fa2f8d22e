/* The SD worker's job payload: a validated request, the API it came from
 * and its route (metrics), the live progress (step, total, ETA, the last
 * preview) that /sdapi/v1/progress reads, the skip flag of A1111's
 * /sdapi/v1/skip, and the outcome: the encoded images with their seeds and
 * infotexts, which the synchronous APIs answer with. On the rbee stream the
 * engine's events are "progress" {step, total, eta_ms[, preview]}, one
 * "image" {index, seed, png, infotext} per image, then "end" {images, seed,
 * stop_reason, time_ms} or "error" {code, message}. */
#ifndef RBEE_SD_JOB_H
#define RBEE_SD_JOB_H

#include "worker/wk_job.h"
#include "worker_sd/sd_request.h"

#include <stdatomic.h>

typedef struct sd_result {
    uint8_t *data; /* PNG (with the "parameters" text) or JPEG */
    size_t len;
    uint64_t seed;
    char *infotext;
} sd_result;

typedef struct sd_task {
    sd_gen_request req;
    char *model_name;
    const char *route_label; /* borrowed from the router */
    atomic_bool skip;        /* A1111 skip: end the current run, go on with the next */
    /* progress and outcome, under the job's mutex */
    int iter, step, total_steps;
    double eta_ms;
    char *preview_b64; /* the last preview (synchronous APIs' progress), NULL: none */
    sd_result *results;
    int n_results, cap_results;
    char stop_reason[16]; /* "completed", "cancelled" */
    double time_ms;
} sd_task;

extern const wk_job_kind sd_job_kind;

/* A new job owning *req (zeroed on return; freed on failure). NULL when out of memory. */
wk_job *sd_job_new(sd_gen_request *req, const char *model_name, const char *route_label);

static inline sd_task *sd_job_task(const wk_job *j) { return (sd_task *)j->payload; }

/* Appends a result (takes data and infotext); false when out of memory (then frees them). */
bool sd_job_add_result(wk_job *j, uint8_t *data, size_t len, uint64_t seed, char *infotext);

#endif
