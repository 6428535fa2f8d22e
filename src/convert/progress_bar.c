/* A terminal progress bar usable as an rb_convert_progress_fn: redraws one
 * line ("[#####.....] 12/40 blk.3.attn_q.weight") with a carriage return and
 * ends it with a newline when the last tensor is done. */
#include "convert/convert.h"

#include <string.h>

void rb_convert_progress_bar(void *ud, int64_t done, int64_t total, const char *tensor_name) {
    FILE *f = ud ? (FILE *)ud : stderr;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int64_t fill = total > 0 ? done * WIDTH / total : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(f, "\r[%s] %lld/%lld %-40.40s", bar, (long long)done, (long long)total, tensor_name ? tensor_name : "");
    if (done >= total) fputc('\n', f);
    fflush(f);
}
