/* The SD worker's metrics in the worker's registry: images made, denoising
 * steps, job outcomes, queue rejections, out-of-memory failures and tiled
 * VAE retries, and two histograms: denoising speed of each run (steps per
 * second) and the time per image (text encoding, denoising and decoding of
 * a run divided by its images), by API route. Queue gauges are the
 * worker's callbacks. */
#ifndef RBEE_SD_METRICS_H
#define RBEE_SD_METRICS_H

#include "worker/wk_metrics.h"

#include <stdbool.h>

typedef struct sd_metrics {
    wk_metric *images, *steps, *cancelled, *failed, *oom, *tiled_retries;
    wk_metric *steps_per_s, *image_s; /* histograms by route */
} sd_metrics;

/* Registers the families in reg (which must outlive m). */
void sd_metrics_init(sd_metrics *m, wk_metrics *reg);

void sd_metrics_step(sd_metrics *m);
/* A finished run of n images: n_steps denoising steps in denoise_ms, total_ms in all. */
void sd_metrics_run(sd_metrics *m, const char *route, int n, int n_steps, double denoise_ms, double total_ms);
void sd_metrics_outcome(sd_metrics *m, bool cancelled, bool failed);
void sd_metrics_oom(sd_metrics *m);
void sd_metrics_tiled_retry(sd_metrics *m);

/* Bucket bounds: steps per second (0.05 .. 200) and seconds per image (0.05 .. 600). */
extern const double sd_steps_per_s_buckets[];
extern const int sd_steps_per_s_buckets_n;
extern const double sd_image_s_buckets[];
extern const int sd_image_s_buckets_n;

#endif
