/* Implementation of sd_metrics.h. */
#include "worker_sd/sd_metrics.h"

#include <string.h>

const double sd_steps_per_s_buckets[] = {0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200};
const int sd_steps_per_s_buckets_n = (int)(sizeof sd_steps_per_s_buckets / sizeof sd_steps_per_s_buckets[0]);
const double sd_image_s_buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600};
const int sd_image_s_buckets_n = (int)(sizeof sd_image_s_buckets / sizeof sd_image_s_buckets[0]);

void sd_metrics_init(sd_metrics *m, wk_metrics *reg) {
    memset(m, 0, sizeof *m);
    m->images = wk_metrics_counter(reg, "llorch_sd_images_total", "Images generated.", NULL);
    m->steps = wk_metrics_counter(reg, "llorch_sd_steps_total", "Denoising steps completed.", NULL);
    m->cancelled = wk_metrics_counter(reg, "llorch_jobs_cancelled_total", "Jobs that ended cancelled.", NULL);
    m->failed = wk_metrics_counter(reg, "llorch_jobs_failed_total", "Jobs that ended with an error.", NULL);
    m->oom = wk_metrics_counter(reg, "llorch_sd_out_of_memory_total",
                                "Generations that failed for lack of (device) memory.", NULL);
    m->tiled_retries = wk_metrics_counter(reg, "llorch_sd_vae_tiled_retries_total",
                                          "VAE decodes retried in tiles after running out of memory.", NULL);
    const char *const route[] = {"route", NULL};
    m->steps_per_s = wk_metrics_histogram(reg, "llorch_sd_steps_per_second",
                                          "Denoising speed of each run (steps per second, CFG batch included).",
                                          route, sd_steps_per_s_buckets, sd_steps_per_s_buckets_n);
    m->image_s = wk_metrics_histogram(reg, "llorch_sd_image_seconds",
                                      "Time per image: a run's text encoding, denoising and decoding over its images.",
                                      route, sd_image_s_buckets, sd_image_s_buckets_n);
}

void sd_metrics_step(sd_metrics *m) { wk_counter_add(m->steps, NULL, 1); }

void sd_metrics_run(sd_metrics *m, const char *route, int n, int n_steps, double denoise_ms, double total_ms) {
    const char *v[] = {route ? route : "other"};
    wk_counter_add(m->images, NULL, n);
    if (denoise_ms > 0 && n_steps > 0) wk_histogram_observe(m->steps_per_s, v, 1e3 * n_steps / denoise_ms);
    for (int i = 0; i < n; i++) wk_histogram_observe(m->image_s, v, total_ms / 1e3 / n);
}

void sd_metrics_outcome(sd_metrics *m, bool cancelled, bool failed) {
    if (cancelled) wk_counter_add(m->cancelled, NULL, 1);
    if (failed) wk_counter_add(m->failed, NULL, 1);
}

void sd_metrics_oom(sd_metrics *m) { wk_counter_add(m->oom, NULL, 1); }
void sd_metrics_tiled_retry(sd_metrics *m) { wk_counter_add(m->tiled_retries, NULL, 1); }
