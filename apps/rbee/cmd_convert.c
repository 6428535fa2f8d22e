/* `rbee convert HF_DIR -o OUT.gguf [--type T] [--name NAME]`: converts a
 * Hugging Face model folder into a GGUF file llama.cpp and rbee both load
 * (see src/convert/convert.h), with a progress bar on a terminal. A
 * Stable Diffusion pipeline folder or single-file checkpoint goes to the SD
 * converter (src/sd/sd_convert.h). */
#include "commands.h"
#include "convert/convert.h"
#include "sd/sd_convert.h"
#include "sd/sd_sd3_gguf.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: rbee convert HF_DIR -o OUT.gguf [--type TYPE] [--name NAME] [--quiet]\n\n"
               "Converts a Hugging Face model folder (config.json, *.safetensors, optional tokenizer.json and\n"
               "tokenizer_config.json) to GGUF. TYPE applies to weight matrices (default f16): %s;\n"
               "mxfp4 writes the experts' stacked matrices as mxfp4 and the other matrices as q8_0.\n"
               "Norms, biases and expert routers stay f32; weights whose rows are not whole blocks are\n"
               "written as f16.\n\n"
               "       rbee convert SD_PIPELINE_DIR|CHECKPOINT.safetensors -o OUT.gguf [--type TYPE] [--config DIR]\n\n"
               "Converts a Stable Diffusion diffusers pipeline folder or single-file checkpoint to GGUF in the\n"
               "original LDM names with its configs (TYPE applies to linear weights; convolution kernels f16).\n"
               "--config DIR: a pipeline folder whose configs describe the single-file checkpoint.\n"
               "SD3 / SD3.5 single files and diffusers folders are written in the single-file layout\n"
               "(general.architecture sd3); --config is then an SD3 diffusers folder, needed for a single\n"
               "file whose MMDiT's or encoders' heads cannot be read from the tensors.\n",
            rb_convert_type_list());
}

int rb_cmd_convert(int argc, char **argv) {
    const char *out = NULL, *type_name = "f16", *name = NULL, *config_dir = NULL;
    bool quiet = false;
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},  {"type", required_argument, 0, 't'},
                                         {"name", required_argument, 0, 'n'}, {"quiet", no_argument, 0, 'q'},
                                         {"config", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:t:n:c:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't': type_name = optarg; break;
        case 'n': name = optarg; break;
        case 'c': config_dir = optarg; break;
        case 'q': quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1 || !out) {
        usage(stderr);
        return 2;
    }
    rb_dtype type;
    if (!rb_dtype_from_name(type_name, &type) || !rb_convert_type_ok(type)) {
        fprintf(stderr, "error: unknown --type '%s' (supported: %s)\n", type_name, rb_convert_type_list());
        return 2;
    }
    rb_convert_opts o = {.type = type, .name = name, .log = quiet ? NULL : stderr};
    if (!quiet && isatty(fileno(stderr))) {
        o.progress = rb_convert_progress_bar;
        o.progress_ud = stderr;
    }
    rb_convert_stats st;
    rb_error err;
    rb_error_clear(&err);
    const char *in = argv[optind];
    const size_t len = strlen(in);
    const bool sd = sd_convert_is_pipeline(in) || sd_sd3_is_folder(in) ||
                    (len > 12 && strcmp(in + len - 12, ".safetensors") == 0);
    if (config_dir && !sd) {
        fprintf(stderr, "error: --config is for Stable Diffusion single-file checkpoints\n");
        return 2;
    }
    if ((sd ? sd_convert_to_gguf(in, out, &o, config_dir, &st, &err) : rb_convert_hf_to_gguf(in, out, &o, &st, &err)) !=
        RB_OK) {
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
