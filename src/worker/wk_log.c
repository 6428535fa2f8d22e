/* Implementation of wk_log.h: formats a line completely in memory, then
 * writes it under the logger's mutex so concurrent threads do not interleave. */
#include "worker/wk_log.h"
#include "worker/wk_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void wk_log_init(wk_log *lg, FILE *out, bool json, wk_log_level min_level, const char *target) {
    lg->out = out ? out : stderr;
    snprintf(lg->target, sizeof lg->target, "%s", target ? target : "rbee");
    lg->json = json;
    lg->min_level = min_level;
    pthread_mutex_init(&lg->mu, NULL);
}

void wk_log_destroy(wk_log *lg) { pthread_mutex_destroy(&lg->mu); }

static const char *level_name(wk_log_level l) {
    switch (l) {
    case WK_LOG_DEBUG: return "debug";
    case WK_LOG_INFO: return "info";
    case WK_LOG_WARN: return "warn";
    default: return "error";
    }
}

static void write_json(wk_log *lg, wk_log_level level, const char *ts, const char *event, json_t *fields,
                       const char *msg) {
    json_t *o = json_object();
    if (!o) return;
    json_object_set_new(o, "timestamp", json_string(ts));
    json_object_set_new(o, "level", json_string(level_name(level)));
    json_object_set_new(o, "target", json_string(lg->target));
    json_object_set_new(o, "event", json_string(event ? event : ""));
    /* json_string rejects invalid UTF-8; messages may quote client input. */
    json_t *m = json_string(msg);
    json_object_set_new(o, "message", m ? m : json_string("(message not UTF-8)"));
    if (fields) json_object_update_missing(o, fields);
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!line) return;
    pthread_mutex_lock(&lg->mu);
    fputs(line, lg->out);
    fputc('\n', lg->out);
    fflush(lg->out);
    pthread_mutex_unlock(&lg->mu);
    free(line);
}

static void write_text(wk_log *lg, wk_log_level level, const char *ts, const char *event, json_t *fields,
                       const char *msg) {
    char extra[1024];
    size_t n = 0;
    extra[0] = '\0';
    const char *k;
    json_t *v;
    if (fields) {
        json_object_foreach(fields, k, v) {
            char *vs = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            int w = snprintf(extra + n, sizeof extra - n, " %s=%s", k, vs ? vs : json_string_value(v));
            free(vs);
            if (w < 0 || (size_t)w >= sizeof extra - n) break;
            n += (size_t)w;
        }
    }
    static const char *const tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    pthread_mutex_lock(&lg->mu);
    fprintf(lg->out, "%s %s %s: %s%s\n", ts, tags[level], event ? event : "", msg, extra);
    fflush(lg->out);
    pthread_mutex_unlock(&lg->mu);
}

void wk_log_event(wk_log *lg, wk_log_level level, const char *event, json_t *fields, const char *fmt, ...) {
    if (!lg || level < lg->min_level) {
        json_decref(fields);
        return;
    }
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char ts[40];
    wk_rfc3339_now(ts, sizeof ts);
    if (lg->json) write_json(lg, level, ts, event, fields, msg);
    else write_text(lg, level, ts, event, fields, msg);
    json_decref(fields);
}
