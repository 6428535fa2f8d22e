/* `rbee`: the command-line tool. Dispatches to the sub-commands in
 * commands.h and prints usage. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command k_commands[] = {
    {"devices", rb_cmd_devices, "list the compute devices this binary can use"},
    {"bench-ops", rb_cmd_bench_ops, "benchmark core ops (matmul, softmax, rms_norm) on the CPU"},
    {"bench", rb_cmd_bench, "model prefill and decode tokens/s (llama-bench style; --random for no download)"},
    {"generate", rb_cmd_generate, "generate text from a prompt, streaming to stdout"},
    {"logits", rb_cmd_logits, "write the raw f32 logits of a token sequence"},
    {"convert", rb_cmd_convert, "convert a Hugging Face model folder to GGUF"},
    {"quantize", rb_cmd_quantize, "requantize the weights of a GGUF file"},
    {"tokenize", rb_cmd_tokenize, "print the token ids of stdin as a JSON array"},
    {"detokenize", rb_cmd_detokenize, "print the text of token ids read from stdin"},
    {"chat-render", rb_cmd_chat_render, "render a JSON conversation with the model's chat template"},
    {"txt2img", rb_cmd_txt2img, "Stable Diffusion: generate images from a prompt (PNG with A1111 infotext)"},
    {"img2img", rb_cmd_img2img, "Stable Diffusion: redraw an image guided by a prompt"},
    {"inpaint", rb_cmd_inpaint, "Stable Diffusion: repaint the masked part of an image"},
    {"bench-sd", rb_cmd_bench_sd, "Stable Diffusion UNet step and image times (--random: no download)"},
};

static void usage(FILE *f) {
    fprintf(f, "Usage: rbee <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-12s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\nrun `rbee <command> --help` for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("rbee %s\n", RBEE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "rbee: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
