/* libFuzzer target: the Stable Diffusion config readers on arbitrary bytes.
 * The first byte picks the reader: the UNet, VAE or CLIP text config.json
 * parsers (which read a path: the bytes are handed over through an
 * in-memory file) or the scheduler_config.json parser, whose accepted
 * configs then build a short sampler schedule (sigmas, timesteps) and run
 * it on zero model outputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rbee/sd_model.h"
#include "rbee/sd_sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static rb_status zero_noise(void *user, float *out, size_t n) {
    (void)user;
    memset(out, 0, n * sizeof *out);
    return RB_OK;
}

static void scheduler(const uint8_t *data, size_t size, unsigned pick) {
    rb_sd_sched_config c;
    if (rb_sd_sched_config_parse(&c, (const char *)data, size, NULL) != RB_OK) return;
    rb_sd_sampler_opts o;
    rb_sd_sampler_opts_init(&o);
    if (rb_sd_sampler_for_config(&c, &o.kind, &o.schedule, NULL) != RB_OK) {
        o.kind = (rb_sd_sampler_kind)(pick % RB_SD_SAMPLER_COUNT_);
        o.schedule = (rb_sd_schedule)((pick / 8) % RB_SD_SCHEDULE_COUNT_);
    }
    o.steps = 1 + (int)(pick % 5);
    o.noise = zero_noise;
    o.n = 8;
    rb_sd_sampler *s = NULL;
    if (rb_sd_sampler_create(&c, &o, &s, NULL) != RB_OK) return;
    float in[8], t, out[8] = {0};
    if (rb_sd_sampler_begin(s, NULL, NULL, NULL) == RB_OK)
        while (rb_sd_sampler_next(s, in, &t))
            if (rb_sd_sampler_feed(s, out, NULL) != RB_OK) break;
    rb_sd_sampler_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned pick = data[0];
    data++;
    size--;
    if (pick % 4 == 3) {
        scheduler(data, size, pick / 4);
        return 0;
    }
    int fd = memfd_create("sd_config", 0);
    if (fd < 0) return 0;
    if (size == 0 || write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        rb_unet_config u;
        rb_vae_config v;
        rb_clip_text_config t;
        switch (pick % 4) {
        case 0: (void)rb_unet_config_load(path, &u, NULL); break;
        case 1: (void)rb_vae_config_load(path, &v, NULL); break;
        default: (void)rb_clip_text_config_load(path, &t, NULL); break;
        }
    }
    close(fd);
    return 0;
}
