/* A program built the way a user of the installed library builds one:
 * only the installed headers and `pkg-config --cflags --libs rbee`. It is
 * placed in the installed bin/ folder, so rb_data_path must find the
 * installed default model; it prints that path, the model's architecture
 * and the ids of "And God said" from the GGUF's own tokenizer, as JSON, for
 * test_install.py to check against transformers' ids. */
#include <rbee/data_path.h>
#include <rbee/gguf.h>
#include <rbee/tokenizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    rb_error err = {0};
    char path[4096];
    if (rb_data_path("models/default/rbee-default-q8_0.gguf", path, sizeof path, &err) != RB_OK) {
        fprintf(stderr, "pc_client: %s\n", err.msg);
        return 1;
    }
    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, &err) != RB_OK) {
        fprintf(stderr, "pc_client: %s\n", err.msg);
        return 1;
    }
    char *arch = NULL;
    rb_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "And God said";
    int rc = 1;
    if (rb_gguf_get_str(g, "general.architecture", &arch) != RB_OK) {
        fprintf(stderr, "pc_client: no general.architecture\n");
    } else if (rb_tokenizer_load_gguf(g, &tok, &err) != RB_OK ||
               rb_tokenizer_encode(tok, text, strlen(text), RB_TOK_ADD_SPECIAL, &ids, &n, &err) != RB_OK) {
        fprintf(stderr, "pc_client: %s\n", err.msg);
    } else {
        printf("{\"path\": \"%s\", \"arch\": \"%s\", \"ids\": [", path, arch);
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", (int)ids[i]);
        printf("]}\n");
        rc = 0;
    }
    free(ids);
    rb_tokenizer_free(tok);
    free(arch);
    rb_gguf_close(g);
    return rc;
}
