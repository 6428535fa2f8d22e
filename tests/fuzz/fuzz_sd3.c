/* libFuzzer target: SD3 single files and SD3 GGUF files. Arbitrary bytes
 * as a safetensors image through sd_sd3_build (the MMDiT's q/k/v row views
 * and swapped modulation copies, the VAE / CLIP / T5 tables, the shape
 * checks) with every mapped tensor's first and last byte read and the
 * configs made; and the same bytes as a GGUF image through
 * sd_sd3_gguf_open_memory (orig_shape, flat-tensor dequantization, the
 * rbee.sd3.* keys checked against the tensors). */
#include <stdint.h>
#include <string.h>

#include "rbee/safetensors.h"
#include "sd/sd_sd3_gguf.h"

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

static uint8_t touch_all(const sd_sd3 *s) {
    return touch(&s->mmdit) ^ touch(&s->t5) ^ touch(&s->ldm.vae) ^ touch(&s->ldm.text1) ^ touch(&s->ldm.text2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rb_st_set *st = NULL;
    if (rb_st_open_memory(data, size, &st, NULL) == RB_OK) {
        sd_tensor_list tl;
        if (sd_tensor_list_st(st, &tl, NULL) == RB_OK) {
            sd_sd3 s;
            if (sd_sd3_detect(&tl) && sd_sd3_build(&tl, &s, NULL) == RB_OK) {
                volatile uint8_t sink = touch_all(&s);
                (void)sink;
                sd_sd3_meta m;
                (void)sd_sd3_meta_make(&s, NULL, &m, NULL);
                (void)sd_sd3_require(&s, SD_SD3_MMDIT | SD_SD3_VAE | SD_SD3_CLIP_L | SD_SD3_CLIP_G | SD_SD3_T5, "x",
                                     NULL);
                sd_sd3_free(&s);
            }
            sd_tensor_list_free(&tl);
        }
        rb_st_close(st);
    }
    sd_sd3_gguf *g = NULL;
    if (sd_sd3_gguf_open_memory(data, size, &g, NULL) == RB_OK) {
        volatile uint8_t sink = touch_all(&g->sd3);
        (void)sink;
        sd_sd3_gguf_unref(g);
    }
    return 0;
}
