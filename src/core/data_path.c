/* Implementation of rbee/data_path.h. The build passes two locations:
 * RBEE_DATA_FROM_BIN, the relative path from the install's bindir to
 * <datadir>/rbee ("../share/rbee"), and RBEE_SOURCE_DATA_DIR, the source
 * tree for programs that run where they were built. The executable's own
 * path comes from /proc/self/exe (symlinked names such as
 * llm-worker-rbee-cpu resolve to the real file). */
#include "rbee/data_path.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RBEE_DATA_FROM_BIN
#define RBEE_DATA_FROM_BIN "../share/rbee"
#endif
#ifndef RBEE_SOURCE_DATA_DIR
#define RBEE_SOURCE_DATA_DIR "."
#endif

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* The installed data folder of the running executable's prefix, if it has one. */
static bool installed_dir(char *buf, size_t len) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0';
    int w = snprintf(buf, len, "%s/%s", exe, RBEE_DATA_FROM_BIN);
    return w > 0 && (size_t)w < len && exists(buf);
}

rb_status rb_data_path(const char *rel, char *buf, size_t len, rb_error *err) {
    if (!rel || !*rel || rel[0] == '/' || !buf || len == 0)
        return rb_error_set(err, RB_E_INVALID, "data path: need a relative path and a buffer");
    char root[4096];
    bool installed = installed_dir(root, sizeof root);
    if (!installed) snprintf(root, sizeof root, "%s", RBEE_SOURCE_DATA_DIR);
    int w = snprintf(buf, len, "%s/%s", root, rel);
    if (w < 0 || (size_t)w >= len) {
        buf[0] = '\0';
        return rb_error_set(err, RB_E_RANGE, "data path: %s/%s is longer than %zu bytes", root, rel, len - 1);
    }
    if (exists(buf)) return RB_OK;
    return rb_error_set(err, RB_E_NOT_FOUND, "%s not found (%s data folder: %s)", rel,
                        installed ? "the installed" : "no installed data next to the executable; the source tree's",
                        root);
}
