/* `rbee quantize IN.gguf OUT.gguf TYPE`: re-encodes every weight matrix of a
 * GGUF file in another type (see rb_quantize_gguf), keeping metadata; a
 * Stable Diffusion file with the SD converter's rules (sd_requantize_gguf). */
#include "commands.h"
#include "convert/convert.h"
#include "sd/sd_convert.h"

#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: rbee quantize IN.gguf OUT.gguf TYPE [--quiet]\n\n"
               "Requantizes every weight matrix to TYPE (%s; mxfp4: the experts' stacked\n"
               "matrices as mxfp4, the other matrices as q8_0); 1-D tensors and expert routers become f32,\n"
               "metadata is copied with general.file_type updated. IQ types (iq4_nl, iq4_xs, iq3_s,\n"
               "iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_m, iq1_s) are read but not written.\n",
            rb_convert_type_list());
}

int rb_cmd_quantize(int argc, char **argv) {
    bool quiet = false;
    static const struct option opts[] = {
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case 'q': quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3) {
        usage(stderr);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1], *type_name = argv[optind + 2];
    rb_dtype type;
    if (!rb_dtype_from_name(type_name, &type) || !rb_convert_type_ok(type)) {
        fprintf(stderr, "error: unknown type '%s' (supported: %s)\n", type_name, rb_convert_type_list());
        return 2;
    }
    rb_convert_opts o = {.type = type, .log = quiet ? NULL : stderr};
    if (!quiet && isatty(fileno(stderr))) {
        o.progress = rb_convert_progress_bar;
        o.progress_ud = stderr;
    }
    rb_convert_stats st;
    rb_error err;
    rb_error_clear(&err);
    const bool sd = sd_convert_is_sd_gguf(in);
    if ((sd ? sd_requantize_gguf(in, out, &o, &st, &err) : rb_quantize_gguf(in, out, &o, &st, &err)) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "wrote %s: %lld tensors, %lld weights as %s, %lld as f16 (fallback), %.2f MiB\n", out,
                (long long)st.n_tensors, (long long)st.n_quantized,
                type == RB_MXFP4 ? "mxfp4 (experts) or q8_0" : rb_dtype_name(type), (long long)st.n_fallback,
                (double)st.bytes_out / (1024.0 * 1024.0));
    return 0;
}
