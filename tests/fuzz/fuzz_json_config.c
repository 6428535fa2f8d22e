/* libFuzzer target: JSON config parsing on arbitrary bytes, then typed and
 * dotted-path lookups of the keys a model loader asks for. */
#include <stdint.h>

#include "rbee/json_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_paths[] = {
    "hidden_size", "rope_scaling.factor", "rope_scaling.type", "a.b.c", "a", "eos_token_id", "x.y", "",
    ".", "a.", "torch_dtype", "architectures",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_json_config *c = NULL;
    if (rb_json_config_parse((const char *)data, size, &c, NULL) != RB_OK) return 0;
    for (size_t k = 0; k < sizeof k_paths / sizeof k_paths[0]; k++) {
        const char *p = k_paths[k];
        int64_t i;
        double d;
        bool b;
        const char *s;
        size_t n = 0;
        (void)rb_json_config_int(c, p, &i);
        (void)rb_json_config_num(c, p, &d);
        (void)rb_json_config_bool(c, p, &b);
        (void)rb_json_config_str(c, p, &s);
        if (rb_json_config_arr_len(c, p, &n) == RB_OK) {
            for (size_t j = 0; j <= n && j < 64; j++) {
                (void)rb_json_config_arr_int(c, p, j, &i);
                (void)rb_json_config_arr_num(c, p, j, &d);
                (void)rb_json_config_arr_str(c, p, j, &s);
            }
        }
    }
    rb_json_config_free(c);
    return 0;
}
