/* Worker logging: one line per event to stderr, human-readable text or JSON
 * lines (--log-format json, RBEE_LOG_FORMAT / LLORCH_LOG_FORMAT=json); JSON
 * lines name the worker in "target". The logger is an explicit object (no
 * global state); lines from many threads never mix. */
#ifndef RBEE_WK_LOG_H
#define RBEE_WK_LOG_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

typedef enum wk_log_level { WK_LOG_DEBUG = 0, WK_LOG_INFO, WK_LOG_WARN, WK_LOG_ERROR } wk_log_level;

typedef struct wk_log {
    FILE *out;
    char target[48]; /* the worker's name */
    bool json;
    wk_log_level min_level;
    pthread_mutex_t mu;
} wk_log;

/* json: true for JSON lines; target: the worker's name (NULL: "rbee"). */
void wk_log_init(wk_log *lg, FILE *out, bool json, wk_log_level min_level, const char *target);
void wk_log_destroy(wk_log *lg);

/* Writes one event. fields (may be NULL) is a JSON object of extra key/value
 * pairs and is consumed (decref'ed). The message is printf-formatted. */
void wk_log_event(wk_log *lg, wk_log_level level, const char *event, json_t *fields, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#define WK_INFO(lg, ev, ...) wk_log_event((lg), WK_LOG_INFO, (ev), NULL, __VA_ARGS__)
#define WK_WARN(lg, ev, ...) wk_log_event((lg), WK_LOG_WARN, (ev), NULL, __VA_ARGS__)
#define WK_ERROR(lg, ev, ...) wk_log_event((lg), WK_LOG_ERROR, (ev), NULL, __VA_ARGS__)
#define WK_DEBUG(lg, ev, ...) wk_log_event((lg), WK_LOG_DEBUG, (ev), NULL, __VA_ARGS__)

#endif
