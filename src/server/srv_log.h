/* Worker logging: one line per event to stderr, human-readable text on a
 * terminal and JSON lines when LLORCH_LOG_FORMAT=json. The logger is an
 * explicit object (no global state); lines from many threads never mix. */
#ifndef RBEE_SRV_LOG_H
#define RBEE_SRV_LOG_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

typedef enum srv_log_level { SRV_LOG_DEBUG = 0, SRV_LOG_INFO, SRV_LOG_WARN, SRV_LOG_ERROR } srv_log_level;

typedef struct srv_log {
    FILE *out;
    bool json;
    srv_log_level min_level;
    pthread_mutex_t mu;
} srv_log;

/* json: true for JSON lines. Call srv_log_format_from_env to pick from the
 * environment (LLORCH_LOG_FORMAT=json|text; default text). */
void srv_log_init(srv_log *lg, FILE *out, bool json, srv_log_level min_level);
bool srv_log_format_from_env(void);
void srv_log_destroy(srv_log *lg);

/* Writes one event. fields (may be NULL) is a JSON object of extra key/value
 * pairs and is consumed (decref'ed). The message is printf-formatted. */
void srv_log_event(srv_log *lg, srv_log_level level, const char *event, json_t *fields, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#define SRV_INFO(lg, ev, ...) srv_log_event((lg), SRV_LOG_INFO, (ev), NULL, __VA_ARGS__)
#define SRV_WARN(lg, ev, ...) srv_log_event((lg), SRV_LOG_WARN, (ev), NULL, __VA_ARGS__)
#define SRV_ERROR(lg, ev, ...) srv_log_event((lg), SRV_LOG_ERROR, (ev), NULL, __VA_ARGS__)
#define SRV_DEBUG(lg, ev, ...) srv_log_event((lg), SRV_LOG_DEBUG, (ev), NULL, __VA_ARGS__)

#endif
