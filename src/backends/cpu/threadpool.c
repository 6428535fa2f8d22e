/* The CPU backend's persistent thread pool. Decoding runs many tiny ops, so
 * waking the workers must be cheap: a run bumps an atomic generation counter;
 * idle workers spin on it for a short while and only then sleep on a condition
 * variable (the runner signals it only when someone actually sleeps). The
 * caller works as thread 0 and waits for a completion counter. */
#include "backends/cpu/cpu_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define RB_TP_SPIN 4096 /* pause iterations before a worker sleeps (a few tens of microseconds) */

struct rb_threadpool {
    int n;             /* threads including the caller */
    pthread_t *thr;    /* n - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;      /* bumped once per run (and at shutdown) */
    atomic_int pending;   /* workers still busy with the current run */
    atomic_int sleepers;  /* workers blocked (or about to block) on cv */
    atomic_bool stop;
    rb_task_fn fn;        /* written before gen is bumped */
    void *ctx;
};

typedef struct worker_arg {
    rb_threadpool *tp;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Waits until gen differs from seen; returns the new value. */
static unsigned wait_generation(rb_threadpool *tp, unsigned seen) {
    for (int i = 0; i < RB_TP_SPIN; i++) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->sleepers, 1); /* seq_cst: pairs with the runner's bump + check */
    unsigned g;
    while ((g = atomic_load(&tp->gen)) == seen) pthread_cond_wait(&tp->cv, &tp->mu);
    atomic_fetch_sub(&tp->sleepers, 1);
    pthread_mutex_unlock(&tp->mu);
    return g;
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    rb_threadpool *tp = wa->tp;
    const int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        seen = wait_generation(tp, seen);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        tp->fn(tp->ctx, ith, tp->n);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

static void wake_all(rb_threadpool *tp) {
    atomic_fetch_add(&tp->gen, 1); /* seq_cst */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
}

rb_status rb_threadpool_create(int n_threads, rb_threadpool **out) {
    if (!out || n_threads < 1 || n_threads > 4096) return RB_E_INVALID;
    *out = NULL;
    rb_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return RB_E_NOMEM;
    tp->n = n_threads;
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->stop, false);
    if (pthread_mutex_init(&tp->mu, NULL) != 0) {
        free(tp);
        return RB_E_BACKEND;
    }
    if (pthread_cond_init(&tp->cv, NULL) != 0) {
        pthread_mutex_destroy(&tp->mu);
        free(tp);
        return RB_E_BACKEND;
    }
    tp->thr = calloc((size_t)n_threads, sizeof *tp->thr);
    if (!tp->thr) {
        tp->n = 1;
        rb_threadpool_destroy(tp);
        return RB_E_NOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->tp = tp;
            wa->ith = i;
        }
        if (!wa || pthread_create(&tp->thr[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n = i; /* destroy joins the i - 1 started workers */
            rb_threadpool_destroy(tp);
            return wa ? RB_E_BACKEND : RB_E_NOMEM;
        }
    }
    *out = tp;
    return RB_OK;
}

void rb_threadpool_destroy(rb_threadpool *tp) {
    if (!tp) return;
    atomic_store(&tp->stop, true);
    wake_all(tp);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->thr[i - 1], NULL);
    pthread_cond_destroy(&tp->cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp->thr);
    free(tp);
}

int rb_threadpool_size(const rb_threadpool *tp) { return tp ? tp->n : 1; }

void rb_threadpool_run(rb_threadpool *tp, rb_task_fn fn, void *ctx) {
    if (tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    wake_all(tp); /* release: publishes fn/ctx/pending */
    fn(ctx, 0, tp->n);
    for (int i = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; i++) {
        if (i < RB_TP_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}
