/* libFuzzer target: PNG / JPEG decoding of arbitrary bytes under small
 * limits (every channel count), PNG text-chunk reading, and re-encoding what
 * decoded (PNG with its texts, JPEG) to exercise the encoders too. */
#include <stdint.h>
#include <stdlib.h>

#include "rbee/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int chans[4] = {0, 1, 3, 4};
    rb_png_text *texts = NULL;
    size_t n_texts = 0;
    if (rb_png_read_text(data, size, &texts, &n_texts, NULL) != RB_OK) n_texts = 0;
    rb_image_decode_opts o = {.channels = chans[size % 4], .max_pixels = 1 << 18, .max_side = 4096};
    rb_image img;
    if (rb_image_decode(data, size, &o, &img, NULL) == RB_OK) {
        uint8_t *out = NULL;
        size_t n = 0;
        rb_png_encode_opts po = {.compression = 1, .texts = texts, .n_texts = n_texts};
        if (rb_png_encode(&img, &po, &out, &n, NULL) == RB_OK) free(out);
        if (img.channels != 4 && rb_jpeg_encode(&img, 75, &out, &n, NULL) == RB_OK) free(out);
        rb_image_free(&img);
    }
    rb_png_texts_free(texts, n_texts);
    return 0;
}
