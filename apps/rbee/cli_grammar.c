/* Implementation of cli_grammar.h. */
#include "cli_grammar.h"

#include <stdio.h>
#include <stdlib.h>

#define CLI_GRAMMAR_MAX_BYTES (4u << 20)

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(CLI_GRAMMAR_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, CLI_GRAMMAR_MAX_BYTES + 1, f) : 0;
    bool bad = !buf || ferror(f) || n > CLI_GRAMMAR_MAX_BYTES;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

bool cli_load_grammar(const char *gbnf_path, const char *schema_path, rb_grammar **out) {
    *out = NULL;
    if (!gbnf_path && !schema_path) return true;
    if (gbnf_path && schema_path) {
        fprintf(stderr, "error: give --grammar or --json-schema, not both\n");
        return false;
    }
    const char *path = gbnf_path ? gbnf_path : schema_path;
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s (missing, unreadable or over 4 MiB)\n", path);
        return false;
    }
    rb_error err;
    rb_error_clear(&err);
    rb_status st;
    if (gbnf_path) {
        st = rb_grammar_parse(text, len, "root", out, &err);
    } else {
        char *gbnf = NULL;
        size_t glen = 0;
        st = rb_json_schema_text_to_gbnf(text, len, "root", &gbnf, &glen, &err);
        if (st == RB_OK) st = rb_grammar_parse(gbnf, glen, "root", out, &err);
        free(gbnf);
    }
    free(text);
    if (st != RB_OK) fprintf(stderr, "error: %s: %s\n", path, err.msg);
    return st == RB_OK;
}
