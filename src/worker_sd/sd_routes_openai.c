/* OpenAI's images API: being written. */
#include "worker_sd/sd_worker.h"

rb_status sd_routes_openai_add(sd_worker *sw, rb_error *err) {
    (void)sw;
    (void)err;
    return RB_OK;
}
