/* `rbee tokenize -m PATH [--no-add-special] [--no-parse-special]` (text on
 * stdin -> JSON array of ids on stdout) and `rbee detokenize -m PATH
 * [--skip-special]` (ids on stdin -> text on stdout). The two tokenize
 * switches are Hugging Face's two behaviours: --no-add-special is
 * add_special_tokens=False (no BOS/EOS from the post-processor; special-token
 * text is still matched), --no-parse-special treats special-token text such
 * as <|eot_id|> as ordinary text (tokenizers' encode_special_tokens);
 * --no-special means both. PATH is a GGUF file, an HF model folder, or a
 * folder with tokenizer.json (+ tokenizer_config.json). */
#include "cli_common.h"
#include "commands.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_tok(FILE *f) {
    fprintf(f, "usage: rbee tokenize -m PATH [--no-add-special] [--no-parse-special] < text\n\n"
               "Prints the token ids of stdin (exact bytes) as a JSON array. By default special tokens are\n"
               "added (BOS/EOS as the tokenizer's post-processor says) and special-token text such as\n"
               "<|im_start|> is matched as those tokens.\n"
               "  --no-add-special    no BOS/EOS added (Hugging Face add_special_tokens=False)\n"
               "  --no-parse-special  special-token text is ordinary text (tokenizers' encode_special_tokens)\n"
               "  --no-special        both of the above\n");
}

static void usage_detok(FILE *f) {
    fprintf(f, "usage: rbee detokenize -m PATH [--skip-special] < ids\n\n"
               "Reads token ids (a JSON array, or integers separated by whitespace or commas) and prints\n"
               "the decoded text without a trailing newline.\n");
}

/* Shared option parsing: -m PATH and up to three boolean flags (NULL: none),
 * the third setting both of the first two. */
static int parse_args(int argc, char **argv, const char *const flags[3], const char **model, bool set[2],
                      void (*usage)(FILE *)) {
    struct option opts[6] = {{"model", required_argument, 0, 'm'}, {"help", no_argument, 0, 'h'}};
    int n = 2;
    for (int i = 0; i < 3; i++)
        if (flags[i]) opts[n++] = (struct option){flags[i], no_argument, 0, 'a' + i};
    opts[n] = (struct option){0, 0, 0, 0};
    int c;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': *model = optarg; break;
        case 'a': set[0] = true; break;
        case 'b': set[1] = true; break;
        case 'c': set[0] = set[1] = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!*model || optind != argc) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int rb_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool no[2] = {false, false}; /* add, parse */
    static const char *const flags[3] = {"no-add-special", "no-parse-special", "no-special"};
    int rc = parse_args(argc, argv, flags, &model, no, usage_tok);
    if (rc >= 0) return rc;
    rb_tokenizer *tok = NULL;
    if (!cli_open_tokenizer(model, &tok)) return 1;
    size_t len = 0;
    char *text = cli_read_stdin(&len);
    if (!text) {
        fprintf(stderr, "error: cannot read stdin\n");
        rb_tokenizer_free(tok);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rb_error err;
    rb_error_clear(&err);
    const unsigned fl = (no[0] ? 0u : (unsigned)RB_TOK_ADD_SPECIAL) | (no[1] ? 0u : (unsigned)RB_TOK_PARSE_SPECIAL);
    rc = 0;
    if (rb_tokenizer_encode(tok, text, len, fl, &ids, &n, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc = 1;
    } else {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
        if (fflush(stdout) != 0) rc = 1;
    }
    free(ids);
    free(text);
    rb_tokenizer_free(tok);
    return rc;
}

/* Parses "[1, 2, 3]" or "1 2 3" / "1,2,3"; false with a message on anything else. */
static bool parse_ids(const char *s, size_t len, int32_t **out, size_t *n_out) {
    size_t cap = 64, n = 0, i = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return false;
    while (i < len && isspace((unsigned char)s[i])) i++;
    bool bracket = i < len && s[i] == '[';
    if (bracket) i++;
    bool need_sep = false, closed = false;
    while (i < len) {
        unsigned char ch = (unsigned char)s[i];
        if (isspace(ch)) { i++; continue; }
        if (ch == ',' && need_sep) { need_sep = false; i++; continue; }
        if (ch == ']' && bracket && !closed) { closed = true; i++; continue; }
        if (closed || !isdigit(ch) || (need_sep && bracket)) goto bad;
        int64_t v = 0;
        while (i < len && isdigit((unsigned char)s[i])) {
            v = v * 10 + (s[i] - '0');
            if (v > INT32_MAX) {
                fprintf(stderr, "error: token id at byte %zu is too large\n", i);
                free(ids);
                return false;
            }
            i++;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, 2 * cap * sizeof *ids);
            if (!ni) { free(ids); fprintf(stderr, "error: out of memory\n"); return false; }
            ids = ni;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        need_sep = true;
        continue;
    bad:
        fprintf(stderr, "error: expected token ids (a JSON array or integers separated by whitespace/commas); "
                        "unexpected '%c' at byte %zu\n", isprint(ch) ? ch : '?', i);
        free(ids);
        return false;
    }
    if (bracket && !closed) {
        fprintf(stderr, "error: token id array is not closed with ']'\n");
        free(ids);
        return false;
    }
    *out = ids;
    *n_out = n;
    return true;
}

int rb_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool set[2] = {false, false};
    static const char *const flags[3] = {"skip-special", NULL, NULL};
    int rc = parse_args(argc, argv, flags, &model, set, usage_detok);
    const bool skip = set[0];
    if (rc >= 0) return rc;
    size_t len = 0;
    char *in = cli_read_stdin(&len);
    if (!in) {
        fprintf(stderr, "error: cannot read stdin\n");
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = parse_ids(in, len, &ids, &n);
    free(in);
    if (!ok) return 1;
    rb_tokenizer *tok = NULL;
    if (!cli_open_tokenizer(model, &tok)) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t tlen = 0;
    rb_error err;
    rb_error_clear(&err);
    rc = 0;
    if (rb_tokenizer_decode(tok, ids, n, skip ? RB_TOK_SKIP_SPECIAL : 0u, &text, &tlen, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc = 1;
    } else if (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout) != 0) {
        rc = 1;
    }
    free(text);
    free(ids);
    rb_tokenizer_free(tok);
    return rc;
}
