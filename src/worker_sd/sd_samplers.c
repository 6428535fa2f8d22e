/* Implementation of sd_samplers.h: two small tables, matched
 * case-insensitively. */
#include "worker_sd/sd_samplers.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct a1111_sampler {
    const char *name;
    const char *aliases[3];
    rb_sd_sampler_kind kind;
} a1111_sampler;

/* A1111's names of the samplers the engine has (A1111 1.9's list order). */
static const a1111_sampler k_samplers[] = {
    {"DPM++ 2M", {"k_dpmpp_2m", NULL}, RB_SD_SAMPLER_DPMPP_2M},
    {"DPM++ SDE", {"k_dpmpp_sde", NULL}, RB_SD_SAMPLER_DPMPP_SDE},
    {"Euler a", {"k_euler_a", "k_euler_ancestral", NULL}, RB_SD_SAMPLER_EULER_A},
    {"Euler", {"k_euler", NULL}, RB_SD_SAMPLER_EULER},
    {"Heun", {"k_heun", NULL}, RB_SD_SAMPLER_HEUN},
    {"LCM", {"k_lcm", NULL}, RB_SD_SAMPLER_LCM},
    {"DDIM", {"ddim", NULL}, RB_SD_SAMPLER_DDIM},
};
#define N_SAMPLERS ((int)(sizeof k_samplers / sizeof k_samplers[0]))

typedef struct a1111_schedule {
    const char *name, *label;
    rb_sd_schedule sched;
} a1111_schedule;

/* "normal" is k-diffusion's default discrete schedule, which is what the
 * engine's default schedule is for the k-samplers. */
static const a1111_schedule k_schedules[] = {
    {"automatic", "Automatic", RB_SD_SCHEDULE_DEFAULT},
    {"karras", "Karras", RB_SD_SCHEDULE_KARRAS},
    {"exponential", "Exponential", RB_SD_SCHEDULE_EXPONENTIAL},
    {"sgm_uniform", "SGM Uniform", RB_SD_SCHEDULE_SGM_UNIFORM},
    {"simple", "Simple", RB_SD_SCHEDULE_SIMPLE},
    {"normal", "Normal", RB_SD_SCHEDULE_DEFAULT},
};
#define N_SCHEDULES ((int)(sizeof k_schedules / sizeof k_schedules[0]))

static bool a1111_sampler_exact(const char *name, rb_sd_sampler_kind *kind) {
    for (int i = 0; i < N_SAMPLERS; i++) {
        if (!strcasecmp(name, k_samplers[i].name)) {
            *kind = k_samplers[i].kind;
            return true;
        }
        for (int a = 0; a < 3 && k_samplers[i].aliases[a]; a++)
            if (!strcasecmp(name, k_samplers[i].aliases[a])) {
                *kind = k_samplers[i].kind;
                return true;
            }
    }
    return false;
}

bool sd_schedule_lookup(const char *name, rb_sd_schedule *sched) {
    if (!name) return false;
    for (int i = 0; i < N_SCHEDULES; i++)
        if (!strcasecmp(name, k_schedules[i].name) || !strcasecmp(name, k_schedules[i].label)) {
            *sched = k_schedules[i].sched;
            return true;
        }
    return rb_sd_schedule_parse(name, sched, NULL) == RB_OK;
}

bool sd_sampler_lookup(const char *name, rb_sd_sampler_kind *kind, rb_sd_schedule *sched, bool *sched_given) {
    *sched = RB_SD_SCHEDULE_DEFAULT;
    *sched_given = false;
    if (!name || !*name) return false;
    if (a1111_sampler_exact(name, kind)) return true;
    /* ours: "euler_a", "dpmpp_2m_karras" */
    if (rb_sd_sampler_kind_parse(name, kind, NULL) == RB_OK) return true;
    if (rb_sd_sampler_spec_parse(name, kind, sched, NULL) == RB_OK) {
        *sched_given = true;
        return true;
    }
    /* A1111 before 1.9: "<sampler> <schedule label>" ("DPM++ 2M Karras") */
    for (int i = 0; i < N_SCHEDULES; i++) {
        const size_t ll = strlen(k_schedules[i].label), nl = strlen(name);
        if (nl <= ll + 1 || name[nl - ll - 1] != ' ' || strcasecmp(name + nl - ll, k_schedules[i].label)) continue;
        char head[64];
        if (nl - ll - 1 >= sizeof head) return false;
        memcpy(head, name, nl - ll - 1);
        head[nl - ll - 1] = '\0';
        if (a1111_sampler_exact(head, kind)) {
            *sched = k_schedules[i].sched;
            *sched_given = true;
            return true;
        }
    }
    return false;
}

static void append(char *buf, size_t len, size_t *n, const char *s) {
    int w = snprintf(buf + *n, len - *n, "%s%s", *n ? ", " : "", s);
    if (w > 0) *n = *n + (size_t)w < len ? *n + (size_t)w : len - 1;
}

void sd_sampler_names(bool a1111, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (a1111) {
        for (int i = 0; i < N_SAMPLERS; i++) append(buf, len, &n, k_samplers[i].name);
        return;
    }
    for (int k = 0; k < RB_SD_SAMPLER_COUNT_; k++) append(buf, len, &n, rb_sd_sampler_kind_name((rb_sd_sampler_kind)k));
}

void sd_schedule_names(bool a1111, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (a1111) {
        for (int i = 0; i < N_SCHEDULES; i++) append(buf, len, &n, k_schedules[i].name);
        return;
    }
    for (int k = 0; k < RB_SD_SCHEDULE_COUNT_; k++) append(buf, len, &n, rb_sd_schedule_name((rb_sd_schedule)k));
}

void sd_sampler_a1111_full_name(rb_sd_sampler_kind kind, rb_sd_schedule sched, char *buf, size_t len) {
    if (sched == RB_SD_SCHEDULE_DEFAULT)
        snprintf(buf, len, "%s", rb_sd_sampler_a1111_name(kind));
    else
        snprintf(buf, len, "%s %s", rb_sd_sampler_a1111_name(kind), rb_sd_schedule_a1111_name(sched));
}

json_t *sd_a1111_samplers_json(void) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < N_SAMPLERS; i++) {
        json_t *al = json_array();
        for (int a = 0; a < 3 && k_samplers[i].aliases[a]; a++) json_array_append_new(al, json_string(k_samplers[i].aliases[a]));
        json_array_append_new(arr, json_pack("{s:s,s:o,s:{}}", "name", k_samplers[i].name, "aliases", al, "options"));
    }
    return arr;
}

json_t *sd_a1111_schedulers_json(void) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < N_SCHEDULES; i++)
        json_array_append_new(arr, json_pack("{s:s,s:s,s:n,s:f,s:b}", "name", k_schedules[i].name, "label",
                                             k_schedules[i].label, "aliases", "default_rho", -1.0,
                                             "need_inner_model", 0));
    return arr;
}
