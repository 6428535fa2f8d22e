/* Implementation of wk_web.h. */
#include "worker/wk_web.h"

rb_status wk_web_add(wk_router *rt, const rb_embedded_file *files, int n, rb_error *err) {
    for (int i = 0; i < n; i++) {
        rb_status s = wk_router_add_static(rt, files[i].path, files[i].ctype, files[i].data, files[i].size, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}
