/* Implementation of sd_job.h. */
#include "worker_sd/sd_job.h"

#include <stdlib.h>
#include <string.h>

static void free_task(void *p) {
    sd_task *t = p;
    if (!t) return;
    sd_request_free(&t->req);
    free(t->model_name);
    free(t->preview_b64);
    for (int i = 0; i < t->n_results; i++) {
        free(t->results[i].data);
        free(t->results[i].infotext);
    }
    free(t->results);
    free(t);
}

static void describe(const wk_job *j, json_t *o) {
    const sd_task *t = sd_job_task(j);
    json_object_set_new(o, "step", json_integer(t->step));
    json_object_set_new(o, "total_steps", json_integer(t->total_steps));
    json_object_set_new(o, "images", json_integer(t->n_results));
    json_object_set_new(o, "seed", json_integer((json_int_t)t->req.seed));
    if (t->stop_reason[0]) json_object_set_new(o, "stop_reason", json_string(t->stop_reason));
}

const wk_job_kind sd_job_kind = {.free_payload = free_task, .describe = describe};

wk_job *sd_job_new(sd_gen_request *req, const char *model_name, const char *route_label) {
    sd_task *t = calloc(1, sizeof *t);
    char *name = strdup(model_name ? model_name : "");
    if (!t || !name) {
        free(t);
        free(name);
        sd_request_free(req);
        return NULL;
    }
    t->req = *req;
    memset(req, 0, sizeof *req);
    t->model_name = name;
    t->route_label = route_label;
    atomic_init(&t->skip, false);
    return wk_job_new(&sd_job_kind, "job-", t);
}

bool sd_job_add_result(wk_job *j, uint8_t *data, size_t len, uint64_t seed, char *infotext) {
    sd_task *t = sd_job_task(j);
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    if (t->n_results == t->cap_results) {
        int nc = t->cap_results ? 2 * t->cap_results : 4;
        sd_result *nr = realloc(t->results, (size_t)nc * sizeof *nr);
        if (!nr) ok = false;
        else {
            t->results = nr;
            t->cap_results = nc;
        }
    }
    if (ok) t->results[t->n_results++] = (sd_result){.data = data, .len = len, .seed = seed, .infotext = infotext};
    pthread_mutex_unlock(&j->mu);
    if (!ok) {
        free(data);
        free(infotext);
    }
    return ok;
}
