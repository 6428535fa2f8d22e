/* Names of the samplers and sigma schedules (include/rbee/sd_sampler.h) as
 * the CLI and HTTP APIs take them, their aliases, "<sampler>_<schedule>"
 * specs, and the sampler a diffusers scheduler class stands for. */
#include "rbee/sd_sampler.h"

#include <stdio.h>
#include <string.h>

static const char *const SAMPLER_NAMES[RB_SD_SAMPLER_COUNT_] = {"euler", "euler_a", "heun", "dpmpp_2m",
                                                               "dpmpp_sde", "ddim", "lcm", "flow_euler"};
static const char *const SCHEDULE_NAMES[RB_SD_SCHEDULE_COUNT_] = {"default", "karras", "exponential", "sgm_uniform",
                                                                 "simple"};

typedef struct alias {
    const char *name;
    int value;
} alias;

static const alias SAMPLER_ALIASES[] = {
    {"euler_ancestral", RB_SD_SAMPLER_EULER_A}, {"k_euler_a", RB_SD_SAMPLER_EULER_A},
    {"k_euler", RB_SD_SAMPLER_EULER},           {"k_heun", RB_SD_SAMPLER_HEUN},
    {"dpm++_2m", RB_SD_SAMPLER_DPMPP_2M},       {"dpmpp2m", RB_SD_SAMPLER_DPMPP_2M},
    {"dpm++_sde", RB_SD_SAMPLER_DPMPP_SDE},
};
static const alias SCHEDULE_ALIASES[] = {{"normal", RB_SD_SCHEDULE_DEFAULT}, {"discrete", RB_SD_SCHEDULE_DEFAULT}};

static int lookup(const char *name, const char *const *names, int n, const alias *al, size_t n_al) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    for (size_t i = 0; i < n_al; i++)
        if (strcmp(name, al[i].name) == 0) return al[i].value;
    return -1;
}

static void join(char *buf, size_t len, const char *const *names, int n) {
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(buf, names[i], len - strlen(buf) - 1);
        if (i + 1 < n) strncat(buf, ", ", len - strlen(buf) - 1);
    }
}

rb_status rb_sd_sampler_kind_parse(const char *name, rb_sd_sampler_kind *out, rb_error *err) {
    if (!name || !out) return rb_error_set(err, RB_E_INVALID, "sampler: NULL name");
    int v = lookup(name, SAMPLER_NAMES, RB_SD_SAMPLER_COUNT_, SAMPLER_ALIASES,
                   sizeof SAMPLER_ALIASES / sizeof SAMPLER_ALIASES[0]);
    if (v < 0) {
        char list[256];
        join(list, sizeof list, SAMPLER_NAMES, RB_SD_SAMPLER_COUNT_);
        return rb_error_set(err, RB_E_INVALID, "unknown sampler '%s' (valid: %s)", name, list);
    }
    *out = (rb_sd_sampler_kind)v;
    return RB_OK;
}

rb_status rb_sd_schedule_parse(const char *name, rb_sd_schedule *out, rb_error *err) {
    if (!name || !out) return rb_error_set(err, RB_E_INVALID, "schedule: NULL name");
    int v = lookup(name, SCHEDULE_NAMES, RB_SD_SCHEDULE_COUNT_, SCHEDULE_ALIASES,
                   sizeof SCHEDULE_ALIASES / sizeof SCHEDULE_ALIASES[0]);
    if (v < 0) {
        char list[256];
        join(list, sizeof list, SCHEDULE_NAMES, RB_SD_SCHEDULE_COUNT_);
        return rb_error_set(err, RB_E_INVALID, "unknown sigma schedule '%s' (valid: %s; normal and discrete mean default)",
                            name, list);
    }
    *out = (rb_sd_schedule)v;
    return RB_OK;
}

rb_status rb_sd_sampler_spec_parse(const char *name, rb_sd_sampler_kind *kind, rb_sd_schedule *schedule,
                                   rb_error *err) {
    if (!name || !kind || !schedule) return rb_error_set(err, RB_E_INVALID, "sampler: NULL name");
    if (rb_sd_sampler_kind_parse(name, kind, NULL) == RB_OK) {
        *schedule = RB_SD_SCHEDULE_DEFAULT;
        return RB_OK;
    }
    /* the longest sampler name that prefixes name, then '_' and a schedule */
    size_t len = strlen(name);
    for (size_t cut = len; cut-- > 1;) {
        if (name[cut] != '_') continue;
        char head[64];
        if (cut >= sizeof head) continue;
        memcpy(head, name, cut);
        head[cut] = '\0';
        if (rb_sd_sampler_kind_parse(head, kind, NULL) == RB_OK &&
            rb_sd_schedule_parse(name + cut + 1, schedule, NULL) == RB_OK)
            return RB_OK;
    }
    char samplers[256], schedules[256];
    join(samplers, sizeof samplers, SAMPLER_NAMES, RB_SD_SAMPLER_COUNT_);
    join(schedules, sizeof schedules, SCHEDULE_NAMES, RB_SD_SCHEDULE_COUNT_);
    return rb_error_set(err, RB_E_INVALID, "unknown sampler '%s' (valid: <sampler> or <sampler>_<schedule>; samplers: %s; "
                        "schedules: %s)", name, samplers, schedules);
}

const char *rb_sd_sampler_kind_name(rb_sd_sampler_kind kind) {
    return (int)kind >= 0 && kind < RB_SD_SAMPLER_COUNT_ ? SAMPLER_NAMES[kind] : "?";
}

const char *rb_sd_schedule_name(rb_sd_schedule schedule) {
    return (int)schedule >= 0 && schedule < RB_SD_SCHEDULE_COUNT_ ? SCHEDULE_NAMES[schedule] : "?";
}

rb_status rb_sd_sampler_for_config(const rb_sd_sched_config *c, rb_sd_sampler_kind *kind, rb_sd_schedule *schedule,
                                   rb_error *err) {
    if (!c || !kind || !schedule) return rb_error_set(err, RB_E_INVALID, "sampler: NULL argument");
    static const struct {
        const char *cls;
        rb_sd_sampler_kind kind;
    } map[] = {
        {"EulerDiscreteScheduler", RB_SD_SAMPLER_EULER},
        {"EulerAncestralDiscreteScheduler", RB_SD_SAMPLER_EULER_A},
        {"HeunDiscreteScheduler", RB_SD_SAMPLER_HEUN},
        {"DPMSolverMultistepScheduler", RB_SD_SAMPLER_DPMPP_2M},
        {"DPMSolverSDEScheduler", RB_SD_SAMPLER_DPMPP_SDE},
        {"DDIMScheduler", RB_SD_SAMPLER_DDIM},
        {"LCMScheduler", RB_SD_SAMPLER_LCM},
        {"FlowMatchEulerDiscreteScheduler", RB_SD_SAMPLER_FLOW_EULER},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(c->class_name, map[i].cls) != 0) continue;
        *kind = map[i].kind;
        *schedule = RB_SD_SCHEDULE_DEFAULT; /* the config's own karras/exponential flags apply to it */
        return RB_OK;
    }
    return rb_error_set(err, RB_E_UNSUPPORTED, "no sampler here for scheduler class '%s'",
                        c->class_name[0] ? c->class_name : "(none)");
}
