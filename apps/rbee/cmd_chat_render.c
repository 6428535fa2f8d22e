/* `rbee chat-render -m PATH [--no-generation-prompt] [--vars JSON]`: reads a
 * JSON array of {role, content} messages on stdin and prints the prompt the
 * model's own chat template makes of it (tokenizer.chat_template of a GGUF
 * file, or tokenizer_config.json / chat_template.jinja of a folder). */
#include "cli_common.h"
#include "commands.h"
#include "rbee/chat_template.h"
#include "rbee/gguf.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f, "usage: rbee chat-render -m PATH [--no-generation-prompt] [--vars JSON] < messages.json\n\n"
               "stdin: a JSON array of message objects, e.g. [{\"role\":\"user\",\"content\":\"Hi\"}].\n"
               "Prints the rendered prompt (with the assistant generation prompt unless\n"
               "--no-generation-prompt) without a trailing newline. --vars sets further template\n"
               "variables, e.g. '{\"enable_thinking\": false}'.\n");
}

static bool set_token_var(rb_chat_template *t, const rb_tokenizer *tok, const char *var, int32_t id, rb_error *err) {
    size_t len = 0;
    const char *p = id >= 0 ? rb_tokenizer_token_text(tok, id, &len) : NULL;
    if (!p) return true;
    char *s = malloc(len + 1);
    if (!s) return false;
    memcpy(s, p, len);
    s[len] = '\0';
    bool ok = rb_chat_template_set_str(t, var, s, err) == RB_OK;
    free(s);
    return ok;
}

/* GGUF: tokenizer.chat_template, with bos_token / eos_token from the vocabulary. */
static rb_chat_template *load_from_gguf(const char *path) {
    rb_error err;
    rb_error_clear(&err);
    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return NULL;
    }
    char *src = NULL;
    rb_chat_template *t = NULL;
    rb_tokenizer *tok = NULL;
    if (rb_gguf_get_str(g, "tokenizer.chat_template", &src) != RB_OK) {
        fprintf(stderr, "error: %s has no tokenizer.chat_template\n", path);
        goto done;
    }
    if (rb_chat_template_parse(src, strlen(src), &t, &err) != RB_OK) {
        fprintf(stderr, "error: %s: chat template: %s\n", path, err.msg);
        goto done;
    }
    if (rb_gguf_find_kv(g, "tokenizer.ggml.tokens")) {
        if (rb_tokenizer_load_gguf(g, &tok, &err) != RB_OK) {
            fprintf(stderr, "error: %s: %s\n", path, err.msg);
            rb_chat_template_free(t);
            t = NULL;
            goto done;
        }
        if (!set_token_var(t, tok, "bos_token", rb_tokenizer_bos(tok), &err) ||
            !set_token_var(t, tok, "eos_token", rb_tokenizer_eos(tok), &err)) {
            fprintf(stderr, "error: %s\n", err.msg[0] ? err.msg : "out of memory");
            rb_chat_template_free(t);
            t = NULL;
        }
    }
done:
    rb_tokenizer_free(tok);
    free(src);
    rb_gguf_close(g);
    return t;
}

static rb_chat_template *load_from_dir(const char *dir) {
    char path[4096];
    rb_error err;
    rb_error_clear(&err);
    rb_chat_template *t = NULL;
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    bool has_cfg = stat(path, &st) == 0;
    rb_status s = has_cfg ? rb_chat_template_load_tokenizer_config(path, NULL, &t, &err) : RB_E_NOT_FOUND;
    if (s == RB_OK) return t;
    if (s != RB_E_NOT_FOUND) {
        fprintf(stderr, "error: %s: %s\n", path, err.msg);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: %s has no chat template (neither tokenizer_config.json nor chat_template.jinja)\n", dir);
        return NULL;
    }
    char *src = malloc(1 << 20);
    if (src) len = fread(src, 1, (1 << 20) - 1, f);
    fclose(f);
    if (!src || len == (1 << 20) - 1) {
        fprintf(stderr, "error: cannot read %s\n", path);
        free(src);
        return NULL;
    }
    if (rb_chat_template_parse(src, len, &t, &err) != RB_OK) {
        fprintf(stderr, "error: %s: %s\n", path, err.msg);
        t = NULL;
    }
    free(src);
    return t;
}

/* The messages must be a JSON array of objects with a string "role". */
static bool check_messages(const char *json, size_t len) {
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) {
        fprintf(stderr, "error: stdin is not valid JSON (line %d: %s)\n", je.line, je.text);
        return false;
    }
    bool ok = json_is_array(root);
    for (size_t i = 0; ok && i < json_array_size(root); i++) {
        json_t *m = json_array_get(root, i);
        ok = json_is_object(m) && json_is_string(json_object_get(m, "role"));
    }
    json_decref(root);
    if (!ok) fprintf(stderr, "error: stdin must be a JSON array of {\"role\": ..., \"content\": ...} objects\n");
    return ok;
}

int rb_cmd_chat_render(int argc, char **argv) {
    const char *model = NULL, *vars = NULL;
    bool gen_prompt = true;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"no-generation-prompt", no_argument, 0, 'g'},
                                         {"vars", required_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'g': gen_prompt = false; break;
        case 'v': vars = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || optind != argc) {
        usage(stderr);
        return 2;
    }
    struct stat st;
    if (stat(model, &st) != 0) {
        fprintf(stderr, "error: model '%s' does not exist\n", model);
        return 1;
    }
    size_t len = 0;
    char *in = cli_read_stdin(&len);
    if (!in) {
        fprintf(stderr, "error: cannot read stdin\n");
        return 1;
    }
    if (!check_messages(in, len)) {
        free(in);
        return 1;
    }
    rb_chat_template *t = S_ISDIR(st.st_mode) ? load_from_dir(model) : load_from_gguf(model);
    if (!t) {
        free(in);
        return 1;
    }
    rb_chat_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = gen_prompt;
    o.extra_vars_json = vars;
    char *out = NULL;
    size_t out_len = 0;
    rb_error err;
    rb_error_clear(&err);
    int rc = 0;
    if (rb_chat_template_apply_json(t, in, &o, &out, &out_len, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc = 1;
    } else if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
        rc = 1;
    }
    free(out);
    free(in);
    rb_chat_template_free(t);
    return rc;
}
