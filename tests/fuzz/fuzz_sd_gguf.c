/* libFuzzer target: Stable Diffusion GGUF files. Arbitrary bytes through
 * sd_gguf_open_memory (architecture check, ComfyUI-GGUF shapes,
 * stable-diffusion.cpp names, dequantized projections, the component maps,
 * rbee.sd.* configs or the derived ones); what opens is walked (every
 * listed and mapped tensor's bytes), its configs copied and written back
 * through the GGUF writer, and given the configs it holds. */
#include <stdint.h>
#include <string.h>

#include "sd/sd_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t touch(const rb_st_tensor *t, size_t n) {
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].nbytes) x ^= ((const uint8_t *)t[i].data)[0] ^ ((const uint8_t *)t[i].data)[t[i].nbytes - 1];
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_gguf *f = NULL;
    if (sd_gguf_open_memory(data, size, &f, NULL) != RB_OK) return 0;
    volatile uint8_t sink = touch(f->list.t, (size_t)f->list.n);
    const sd_name_map *maps[4] = {&f->ldm.unet, &f->ldm.vae, &f->ldm.text1, &f->ldm.text2};
    for (int i = 0; i < 4; i++) sink ^= touch(maps[i]->tensors, maps[i]->n);
    (void)sink;
    sd_gguf_configs c;
    if (sd_gguf_configs_copy(&f->cfg, &c, NULL) == RB_OK) {
        rb_gguf_writer *w = NULL;
        if (c.family && rb_gguf_writer_create(&w, NULL) == RB_OK) {
            (void)sd_gguf_write_configs(w, &c, NULL);
            rb_gguf_writer_free(w);
        }
        (void)sd_gguf_use_configs(f, &c, NULL);
        sd_gguf_configs_free(&c);
    }
    sd_gguf_unref(f);
    return 0;
}
