/* rb_sd_default_model: where the bundled default SD model is, so the SD
 * worker and `rbee txt2img` run without a download or a --model argument
 * and find the model the same way, in the source tree and when installed. */
#include "rbee/data_path.h"
#include "rbee/sd_pipeline.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool fits(char *buf, size_t len, int w) {
    if (w >= 0 && (size_t)w < len) return true;
    buf[0] = '\0';
    return false;
}

rb_status rb_sd_default_model(char *buf, size_t len, rb_error *err) {
    if (!buf || len == 0) return rb_error_set(err, RB_E_INVALID, "default SD model: no buffer");
    struct stat st;
    const char *env = getenv("RBEE_DEFAULT_SD_MODEL");
    if (env && *env) {
        if (stat(env, &st) != 0)
            return rb_error_set(err, RB_E_NOT_FOUND, "RBEE_DEFAULT_SD_MODEL=%s does not exist", env);
        if (!fits(buf, len, snprintf(buf, len, "%s", env)))
            return rb_error_set(err, RB_E_RANGE, "RBEE_DEFAULT_SD_MODEL is longer than %zu bytes", len - 1);
        return RB_OK;
    }
    char dir[4096], p[4200];
    rb_status s = rb_data_path("models/default-sd", dir, sizeof dir, err);
    if (s != RB_OK) return s;
    snprintf(p, sizeof p, "%s/model_index.json", dir);
    if (is_file(p)) {
        if (!fits(buf, len, snprintf(buf, len, "%s", dir)))
            return rb_error_set(err, RB_E_RANGE, "default SD model: %s is longer than %zu bytes", dir, len - 1);
        return RB_OK;
    }
    DIR *d = opendir(dir);
    if (d) {
        /* the first .gguf by name, so the choice does not depend on the directory's order */
        char best[256] = "";
        struct dirent *de;
        while ((de = readdir(d))) {
            const size_t n = strlen(de->d_name);
            if (de->d_name[0] == '.' || n <= 5 || n >= sizeof best || strcasecmp(de->d_name + n - 5, ".gguf") != 0)
                continue;
            if (!best[0] || strcmp(de->d_name, best) < 0) snprintf(best, sizeof best, "%s", de->d_name);
        }
        closedir(d);
        if (best[0]) {
            if (!fits(buf, len, snprintf(buf, len, "%s/%s", dir, best)))
                return rb_error_set(err, RB_E_RANGE, "default SD model: path longer than %zu bytes", len - 1);
            return RB_OK;
        }
    }
    return rb_error_set(err, RB_E_NOT_FOUND,
                        "%s holds no diffusers pipeline (model_index.json) or .gguf file; set RBEE_DEFAULT_SD_MODEL "
                        "or pass a model",
                        dir);
}
