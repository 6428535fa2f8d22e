/* Sampler and schedule names as the three APIs spell them, mapped to the
 * engine's: rbee's own ("euler_a", "dpmpp_2m_karras"), AUTOMATIC1111's
 * display names and aliases ("Euler a", "k_euler_a", "DPM++ 2M Karras";
 * case does not matter, as in A1111), and A1111's scheduler names and
 * labels ("karras", "SGM Uniform"). Samplers and schedules the engine does
 * not have are not mapped to a neighbour: the lookup fails and the caller
 * answers 400 with the valid names. Also the /sdapi/v1/samplers and
 * /sdapi/v1/schedulers lists. */
#ifndef RBEE_SD_SAMPLERS_H
#define RBEE_SD_SAMPLERS_H

#include "rbee/sd_pipeline.h"
#include "rbee/sd_sampler.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* name: ours or A1111's. *sched_given says whether the name carried a
 * schedule ("DPM++ 2M Karras", "dpmpp_2m_karras"); otherwise *sched is
 * RB_SD_SCHEDULE_DEFAULT. False when the name is unknown. */
bool sd_sampler_lookup(const char *name, rb_sd_sampler_kind *kind, rb_sd_schedule *sched, bool *sched_given);
/* name: ours ("karras", "default", "normal") or A1111's ("Automatic",
 * "sgm_uniform", "SGM Uniform"). */
bool sd_schedule_lookup(const char *name, rb_sd_schedule *sched);

/* The valid names for an error message: A1111's display names (a1111) or
 * ours, comma-separated. */
void sd_sampler_names(bool a1111, char *buf, size_t len);
void sd_schedule_names(bool a1111, char *buf, size_t len);

/* A1111's display name of a sampler + schedule as older clients name it
 * ("DPM++ 2M Karras"; "Euler a" for the default schedule). */
void sd_sampler_a1111_full_name(rb_sd_sampler_kind kind, rb_sd_schedule sched, char *buf, size_t len);

/* [{"name","aliases","options"}] and [{"name","label","aliases","default_rho","need_inner_model"}]. */
json_t *sd_a1111_samplers_json(void);
json_t *sd_a1111_schedulers_json(void);

#endif
