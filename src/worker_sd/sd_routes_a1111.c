/* AUTOMATIC1111's API (/sdapi/v1): being written. */
#include "worker_sd/sd_worker.h"

rb_status sd_routes_a1111_add(sd_worker *sw, rb_error *err) {
    (void)sw;
    (void)err;
    return RB_OK;
}
