/* Writing a GGUF whose tensors are re-encoded from another file's: the loop
 * `rbee quantize` (quantize_gguf.c) and the SD requantizer (src/sd) share.
 * Each tensor is copied as it is when the caller keeps it, else decoded to
 * f32 and encoded as its output dtype, streamed through rb_gguf_stream so
 * that one tensor at a time is in memory. */
#ifndef RBEE_CONVERT_REQUANT_STREAM_H
#define RBEE_CONVERT_REQUANT_STREAM_H

#include "convert/convert.h"
#include "rbee/gguf.h"

#include <stdbool.h>

/* One input tensor: its bytes and dtype, its element count (whole rows of
 * the output's ne[0]) and whether its bytes go out unchanged (then
 * desc.dtype is dtype; bytes of another size than the output's are
 * re-encoded all the same). */
typedef struct cv_requant_src {
    const void *data;
    size_t nbytes;
    rb_dtype dtype;
    int64_t nel;
    bool keep;
} cv_requant_src;

/* Writes out_path: w's metadata, then the n tensors described by desc
 * (names, shapes, output dtypes) from src, reporting progress through
 * opts->progress; stats->n_tensors and bytes_out on success. On failure
 * nothing is left at out_path. */
rb_status cv_requant_write(const char *out_path, rb_gguf_writer *w, const rb_gguf_tensor_desc *desc,
                           const cv_requant_src *src, size_t n, const rb_convert_opts *opts, rb_convert_stats *stats,
                           rb_error *err);

#endif
