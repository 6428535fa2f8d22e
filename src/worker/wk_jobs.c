/* Implementation of wk_jobs.h: a small array under a mutex (the table holds
 * at most queue + parallel + recently finished jobs). */
#include "worker/wk_jobs.h"

#include <stdlib.h>
#include <string.h>

void wk_jobs_init(wk_jobs *t) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
}

void wk_jobs_destroy(wk_jobs *t) {
    for (size_t i = 0; i < t->n; i++) wk_job_unref(t->items[i]);
    free(t->items);
    pthread_mutex_destroy(&t->mu);
    memset(t, 0, sizeof *t);
}

bool wk_jobs_add(wk_jobs *t, wk_job *j) {
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        wk_job **ni = realloc(t->items, nc * sizeof *ni);
        if (!ni) {
            pthread_mutex_unlock(&t->mu);
            return false;
        }
        t->items = ni;
        t->cap = nc;
    }
    t->items[t->n++] = wk_job_ref(j);
    pthread_mutex_unlock(&t->mu);
    return true;
}

wk_job *wk_jobs_find(wk_jobs *t, const char *id) {
    wk_job *found = NULL;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->items[i]->id, id) == 0) {
            found = wk_job_ref(t->items[i]);
            break;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return found;
}

size_t wk_jobs_reap(wk_jobs *t, double now_ms, int64_t ttl_ms) {
    size_t removed = 0;
    pthread_mutex_lock(&t->mu);
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        wk_job *j = t->items[i];
        pthread_mutex_lock(&j->mu);
        bool expired = (j->state == WK_JOB_DONE || j->state == WK_JOB_FAILED) &&
                       now_ms - j->finished_ms >= (double)ttl_ms;
        pthread_mutex_unlock(&j->mu);
        if (expired) {
            wk_job_unref(j);
            removed++;
        } else {
            t->items[w++] = j;
        }
    }
    t->n = w;
    if (t->n == 0 && t->cap > 64) { /* give memory back after a burst */
        free(t->items);
        t->items = NULL;
        t->cap = 0;
    }
    pthread_mutex_unlock(&t->mu);
    return removed;
}

size_t wk_jobs_count(wk_jobs *t) {
    pthread_mutex_lock(&t->mu);
    size_t n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}
