/* libFuzzer target: single-file Stable Diffusion checkpoints. Arbitrary
 * bytes as a safetensors image, its tensors through sd_ldm_build (family
 * and structure detection, the UNet / VAE / CLIP / OpenCLIP name tables
 * with their row views and transposed copies), every mapped tensor's first
 * and last byte read, then the configs derived from the tables. */
#include <stdint.h>
#include <string.h>

#include "rbee/safetensors.h"
#include "sd/sd_gguf.h"
#include "sd/sd_ldm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t touch(const sd_name_map *m) {
    uint8_t x = 0;
    for (size_t i = 0; i < m->n; i++) {
        const rb_st_tensor *t = &m->tensors[i];
        if (sd_name_map_find(m, m->names[i]) != t) __builtin_trap(); /* names are unique */
        if (t->nbytes) x ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_st_set *s = NULL;
    if (rb_st_open_memory(data, size, &s, NULL) != RB_OK) return 0;
    sd_tensor_list tl;
    if (sd_tensor_list_st(s, &tl, NULL) == RB_OK) {
        sd_ldm l;
        if (sd_ldm_build(&tl, &l, NULL) == RB_OK) {
            volatile uint8_t sink = touch(&l.unet) ^ touch(&l.vae) ^ touch(&l.text1) ^ touch(&l.text2);
            (void)sink;
            sd_gguf_configs c;
            (void)sd_gguf_derive_configs(&l, l.family, &c, NULL);
            sd_gguf_configs_free(&c);
            sd_ldm_free(&l);
        }
        sd_tensor_list_free(&tl);
    }
    rb_st_close(s);
    return 0;
}
