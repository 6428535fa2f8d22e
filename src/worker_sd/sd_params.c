/* sd_request_params (sd_request.h): a request as the engine's parameters
 * for one run. Apart from the parsers so that they need nothing of the
 * engine beyond its sampler names (the request fuzzer links them alone). */
#include "worker_sd/sd_request.h"

void sd_request_params(const sd_gen_request *r, int iter, rb_sd_params *p) {
    rb_sd_params_init(p);
    p->prompt = r->prompt ? r->prompt : "";
    p->negative_prompt = r->negative_prompt;
    p->width = r->width;
    p->height = r->height;
    p->steps = r->steps;
    p->guidance_scale = r->cfg_scale;
    p->sampler = r->sampler_set ? rb_sd_sampler_kind_name(r->sampler) : NULL;
    p->schedule = r->schedule_set ? rb_sd_schedule_name(r->schedule) : NULL;
    p->eta = r->eta;
    p->seed = r->seed + (uint64_t)iter * (uint64_t)r->batch;
    p->rng = r->rng;
    p->clip_skip = r->clip_skip;
    p->prompt_mode = r->prompt_mode;
    p->emphasis = r->emphasis;
    p->batch = r->batch;
    p->strength = r->strength;
    p->init_image = r->init.data ? &r->init : NULL;
    p->mask = r->mask.data ? &r->mask : NULL;
}

void sd_request_params_arch(const sd_gen_request *r, rb_sd_arch arch, rb_sd_params *p) {
    if (arch == RB_SD_ARCH_SD3 && r->api == SD_API_A1111 && r->sampler_set && r->sampler == RB_SD_SAMPLER_EULER)
        p->sampler = rb_sd_sampler_kind_name(RB_SD_SAMPLER_FLOW_EULER);
}
