/* The real `rbee` binary (path in argv[1]) on the real tokenizer files
 * (fetched by the convert_fetch fixture): tokenize / detokenize / chat-render
 * against HF `tokenizers` and transformers' apply_chat_template output
 * (tests/data/tokenizer, tests/data/chat), both from the tokenizer folder and
 * from a GGUF written by `rbee convert` (tiny model + that tokenizer), the
 * --no-add-special / --no-parse-special switches against HF's two
 * behaviours (add_special_tokens=False, encode_special_tokens), then
 * `rbee quantize`, and bad input: missing model, garbage stdin, unknown
 * --type, unknown model_type, missing tensor. */
#include "convert_testutil.h"

#include <jansson.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct cli_env {
    const char *rbee;
    char tmp[1024];
} cli_env;

typedef struct run_out {
    int rc;
    char *out, *err; /* NUL-terminated */
    size_t out_len;
} run_out;

static char *slurp(const char *path, size_t *len) {
    size_t n = 0;
    char *p = tu_read_file(path, &n);
    char *z = malloc(n + 1);
    assert_non_null(z);
    if (n) memcpy(z, p, n);
    z[n] = '\0';
    free(p);
    if (len) *len = n;
    return z;
}

/* Runs rbee with args (NULL-terminated, without argv[0]) and stdin data. */
static run_out run(const cli_env *env, const char *const *args, const char *in, size_t in_len) {
    char pin[2048], pout[2048], perr[2048];
    snprintf(pin, sizeof pin, "%s/stdin", env->tmp);
    snprintf(pout, sizeof pout, "%s/stdout", env->tmp);
    snprintf(perr, sizeof perr, "%s/stderr", env->tmp);
    FILE *f = fopen(pin, "wb");
    assert_non_null(f);
    if (in_len) assert_int_equal(fwrite(in, 1, in_len, f), in_len);
    fclose(f);
    const char *argv[32];
    int n = 0;
    argv[n++] = env->rbee;
    while (args[n - 1] && n < 31) { argv[n] = args[n - 1]; n++; }
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fi = open(pin, O_RDONLY), fo = open(pout, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(perr, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fi < 0 || fo < 0 || fe < 0 || dup2(fi, 0) < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
        execv(env->rbee, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    run_out r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(pout, &r.out_len);
    r.err = slurp(perr, NULL);
    return r;
}

static void run_free(run_out *r) {
    free(r->out);
    free(r->err);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_fail(const cli_env *env, const char *const *args, const char *in, int rc, const char *msg) {
    run_out r = run(env, args, in, strlen(in));
    if (r.rc != rc || !strstr(r.err, msg))
        fail_msg("rbee %s: rc %d (want %d), stderr '%s' lacks '%s'", args[0], r.rc, rc, r.err, msg);
    run_free(&r);
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

static const char *tok_dir(char *buf, size_t len, const char *name) {
    const char *d = getenv("RBEE_TOKENIZERS_DIR");
    snprintf(buf, len, "%s/%s", d ? d : RBEE_CONVERT_TOKENIZERS_DIR, name);
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", buf);
    struct stat st;
    if (stat(p, &st) != 0) fail_msg("%s missing: run scripts/fetch-tokenizers.sh", p);
    return buf;
}

/* ids of `rbee tokenize` output == JSON array want */
static void check_ids(const char *what, const char *out, const json_t *want) {
    json_error_t je;
    json_t *got = json_loads(out, 0, &je);
    if (!got) fail_msg("%s: output is not JSON: %s", what, out);
    if (!json_equal(got, want)) {
        char *w = json_dumps(want, JSON_COMPACT);
        fail_msg("%s: ids %s, HF tokenizers gives %s", what, out, w);
    }
    json_decref(got);
}

/* ids as a JSON array, or space- / comma-separated integers */
static char *ids_text(const json_t *ids, int style) {
    if (style == 0) return json_dumps(ids, JSON_COMPACT);
    size_t n = json_array_size(ids);
    char *s = malloc(n * 12 + 4);
    assert_non_null(s);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(s + k, "%s%lld", i ? (style == 1 ? " \n" : ",") : "",
                             (long long)json_integer_value(json_array_get(ids, i)));
    s[k] = '\0';
    return s;
}

/* tokenize (default, --no-add-special and --no-special) and detokenize on a
 * few corpus cases */
static void check_tokenizer(const cli_env *env, const char *model, const char *name, int stride) {
    char path[2048];
    snprintf(path, sizeof path, "%s/tokenizer/%s.json", RBEE_TEST_DATA_DIR, name);
    json_t *ref = load_json(path);
    json_t *cases = json_object_get(ref, "cases");
    size_t n = json_array_size(cases), checked = 0;
    for (size_t i = 0; i < n; i += (size_t)stride) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tlen = json_string_length(json_object_get(c, "text"));
        char what[256];
        snprintf(what, sizeof what, "%s case %zu via %s", name, i, model);
        run_out r = run(env, ARGS("tokenize", "-m", model), text, tlen);
        if (r.rc != 0) fail_msg("%s: rc %d: %s", what, r.rc, r.err);
        check_ids(what, r.out, json_object_get(c, "ids_special"));
        run_free(&r);
        /* add_special_tokens=False: no BOS/EOS, special-token text still matched */
        r = run(env, ARGS("tokenize", "-m", model, "--no-add-special"), text, tlen);
        if (r.rc != 0) fail_msg("%s --no-add-special: rc %d: %s", what, r.rc, r.err);
        check_ids(what, r.out, json_object_get(c, "ids_plain"));
        run_free(&r);
        if (!memchr(text, '<', tlen)) { /* no special-token text: add_special_tokens=False ids */
            r = run(env, ARGS("tokenize", "-m", model, "--no-special"), text, tlen);
            assert_int_equal(r.rc, 0);
            check_ids(what, r.out, json_object_get(c, "ids_plain"));
            run_free(&r);
        }
        char *ids = ids_text(json_object_get(c, "ids_special"), (int)(i % 3));
        r = run(env, ARGS("detokenize", "-m", model), ids, strlen(ids));
        const json_t *dec = json_object_get(c, "decoded");
        if (r.rc != 0 || r.out_len != json_string_length(dec) || memcmp(r.out, json_string_value(dec), r.out_len))
            fail_msg("%s: detokenize gives '%s' (rc %d), HF gives '%s'", what, r.out, r.rc, json_string_value(dec));
        run_free(&r);
        free(ids);
        checked++;
    }
    print_message("%-9s %zu corpus cases: tokenize/detokenize via %s identical to HF\n", name, checked, model);
    json_decref(ref);
}

/* --no-parse-special against HF tokenizers with encode_special_tokens: a
 * Llama 3 user message holding special-token text
 * (tests/data/chat_tokens/llama3.json, an injected case) is encoded there
 * between the template's <|end_header_id|> and its closing <|eot_id|> with
 * special-token text as plain text, so "\n\n" + content gives exactly those
 * ids; with special-token text matched (the default) it gives the case's
 * all-special ids for the same span. */
static void check_parse_special(const cli_env *env, const char *model) {
    char path[2048];
    snprintf(path, sizeof path, "%s/chat_tokens/llama3.json", RBEE_TEST_DATA_DIR);
    json_t *ref = load_json(path);
    json_t *cases = json_object_get(ref, "cases");
    size_t checked = 0, i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *msgs = json_object_get(c, "messages");
        json_t *m0 = json_array_get(msgs, 0);
        const char *role = json_string_value(json_object_get(m0, "role"));
        const char *content = json_string_value(json_object_get(m0, "content"));
        /* one message whose role is plain (the template's <|end_header_id|> at index 3) */
        if (!json_is_true(json_object_get(c, "injected")) || json_array_size(msgs) != 1 || !role || !content ||
            strcmp(role, "user") != 0 || json_integer_value(json_array_get(json_object_get(c, "ids"), 3)) != 128007)
            continue;
        /* the template writes the content trimmed */
        size_t b = 0, e = strlen(content);
        while (b < e && strchr(" \t\n\r", content[b])) b++;
        while (e > b && strchr(" \t\n\r", content[e - 1])) e--;
        char text[4096];
        snprintf(text, sizeof text, "\n\n%.*s", (int)(e - b), content + b);
        /* ids: [BOS, <|start_header_id|>, user, <|end_header_id|>, the span..., <|eot_id|>, ...] */
        json_t *plain = json_object_get(c, "ids"), *all = json_object_get(c, "ids_all_special");
        json_t *want = json_array();
        for (size_t k = 4; k < json_array_size(plain) && json_integer_value(json_array_get(plain, k)) != 128009; k++)
            json_array_append(want, json_array_get(plain, k));
        run_out r = run(env, ARGS("tokenize", "-m", model, "--no-add-special", "--no-parse-special"), text, strlen(text));
        if (r.rc != 0) fail_msg("parse-special case %zu: rc %d: %s", i, r.rc, r.err);
        check_ids("--no-add-special --no-parse-special on an injected llama3 message", r.out, want);
        run_free(&r);
        r = run(env, ARGS("tokenize", "-m", model, "--no-special"), text, strlen(text)); /* the alias of both */
        check_ids("--no-special on an injected llama3 message", r.out, want);
        run_free(&r);
        json_decref(want);
        /* matched (the default): the all-special ids from index 4, up to the template's <|eot_id|> */
        r = run(env, ARGS("tokenize", "-m", model, "--no-add-special"), text, strlen(text));
        json_error_t je;
        json_t *got = json_loads(r.out, 0, &je);
        assert_non_null(got);
        const size_t ng = json_array_size(got);
        assert_true(4 + ng < json_array_size(all));
        for (size_t k = 0; k < ng; k++)
            if (!json_equal(json_array_get(got, k), json_array_get(all, 4 + k)))
                fail_msg("special text matched: id %zu differs from HF's all-special ids", k);
        assert_int_equal(json_integer_value(json_array_get(all, 4 + ng)), 128009);
        bool has_special = false;
        for (size_t k = 0; k < ng; k++) has_special = has_special || json_integer_value(json_array_get(got, k)) >= 128000;
        assert_true(has_special);
        json_decref(got);
        run_free(&r);
        checked++;
    }
    assert_true(checked > 0);
    print_message("llama3    %zu injected messages: --no-parse-special identical to HF encode_special_tokens\n", checked);
    json_decref(ref);
}

/* chat-render on the cases of tests/data/chat/<name>.json (every stride-th) */
static void check_chat(const cli_env *env, const char *model, const char *name, int stride) {
    char path[2048];
    snprintf(path, sizeof path, "%s/chat/%s.json", RBEE_TEST_DATA_DIR, name);
    json_t *ref = load_json(path);
    json_t *cases = json_object_get(ref, "cases");
    size_t n = json_array_size(cases), ok = 0, errs = 0;
    for (size_t i = 0; i < n; i += (size_t)stride) {
        json_t *c = json_array_get(cases, i);
        char *msgs = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
        json_t *extra = json_object_get(c, "extra");
        char *vars = extra && json_object_size(extra) ? json_dumps(extra, JSON_COMPACT) : NULL;
        bool gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *args[10] = {"chat-render", "-m", model};
        int k = 3;
        if (!gen) args[k++] = "--no-generation-prompt";
        if (vars) { args[k++] = "--vars"; args[k++] = vars; }
        args[k] = NULL;
        run_out r = run(env, args, msgs, strlen(msgs));
        const json_t *want = json_object_get(c, "rendered");
        if (want) {
            if (r.rc != 0 || r.out_len != json_string_length(want) || memcmp(r.out, json_string_value(want), r.out_len))
                fail_msg("%s case %zu via %s: rc %d, rendered\n'%s'\ntransformers:\n'%s'\n%s", name, i, model, r.rc,
                         r.out, json_string_value(want), r.err);
            ok++;
        } else { /* the template raises */
            if (r.rc == 0) fail_msg("%s case %zu: expected a template error", name, i);
            assert_true(r.err[0] != '\0');
            errs++;
        }
        run_free(&r);
        free(msgs);
        free(vars);
    }
    print_message("%-9s chat-render via %s: %zu renders identical to transformers, %zu errors as expected\n", name,
                  model, ok, errs);
    json_decref(ref);
}

static int setup(void **state) {
    cli_env *env = *state;
    ct_tmpdir(env->tmp, sizeof env->tmp);
    return 0;
}

static int teardown(void **state) {
    cli_env *env = *state;
    ct_rmtree(env->tmp);
    return 0;
}

static void test_tokenize_from_folders(void **state) {
    const cli_env *env = *state;
    static const char *const names[] = {"llama2", "llama3", "llama3_1", "qwen3", "gemma3"};
    for (size_t i = 0; i < 5; i++) {
        char dir[1024];
        tok_dir(dir, sizeof dir, names[i]);
        check_tokenizer(env, dir, names[i], strcmp(names[i], "gemma3") == 0 ? 40 : 13);
        if (!strcmp(names[i], "llama3")) check_parse_special(env, dir);
    }
    static const char *const chats[] = {"llama3", "llama3_1", "qwen3", "gemma3"};
    for (size_t i = 0; i < 4; i++) {
        char dir[1024];
        tok_dir(dir, sizeof dir, chats[i]);
        check_chat(env, dir, chats[i], 1);
    }
}

/* A tiny model folder with a real tokenizer -> `rbee convert` -> the GGUF
 * tokenizes and renders chats exactly like the folder's files. */
static void test_convert_then_use_gguf(void **state) {
    const cli_env *env = *state;
    static const char *const names[] = {"llama2", "llama3_1", "qwen3", "gemma3"};
    char model[1024];
    ct_model_dir(model, sizeof model, "llama_gqa");
    for (size_t i = 0; i < 4; i++) {
        char hf[1400], src[2048], dst[2048], tdir[1024], out[1400];
        tok_dir(tdir, sizeof tdir, names[i]);
        snprintf(hf, sizeof hf, "%s/hf_%s", env->tmp, names[i]);
        assert_int_equal(mkdir(hf, 0755), 0);
        static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json",
                                            "tokenizer_config.json"};
        for (int f = 0; f < 4; f++) {
            snprintf(src, sizeof src, "%s/%s", f < 2 ? model : tdir, files[f]);
            snprintf(dst, sizeof dst, "%s/%s", hf, files[f]);
            assert_int_equal(symlink(src, dst), 0);
        }
        snprintf(out, sizeof out, "%s/%s.gguf", env->tmp, names[i]);
        run_out r = run(env, ARGS("convert", hf, "-o", out, "--type", "q8_0"), "", 0);
        if (r.rc != 0) fail_msg("convert %s: %s", names[i], r.err);
        assert_non_null(strstr(r.err, "wrote"));
        run_free(&r);
        rb_gguf *g = ct_gguf_open(out);
        assert_non_null(rb_gguf_find_kv(g, "tokenizer.ggml.tokens"));
        assert_non_null(rb_gguf_find_kv(g, "tokenizer.ggml.model"));
        assert_int_equal(rb_gguf_find_kv(g, "tokenizer.chat_template") != NULL, strcmp(names[i], "llama2") != 0);
        rb_gguf_close(g);
        check_tokenizer(env, out, names[i], strcmp(names[i], "gemma3") == 0 ? 40 : 16);
        if (strcmp(names[i], "llama2") != 0) check_chat(env, out, names[i], strcmp(names[i], "gemma3") == 0 ? 6 : 3);
        else expect_fail(env, ARGS("chat-render", "-m", out), "[]", 1, "no tokenizer.chat_template");

        /* rbee quantize on the converted file keeps the tokenizer */
        char q[2100];
        snprintf(q, sizeof q, "%s.q4_0", out);
        r = run(env, ARGS("quantize", out, q, "q4_0"), "", 0);
        if (r.rc != 0) fail_msg("quantize: %s", r.err);
        run_free(&r);
        g = ct_gguf_open(q);
        uint32_t ft = 0;
        TU_OK(rb_gguf_get_u32(g, "general.file_type", &ft));
        assert_int_equal(ft, 2);
        assert_int_equal(rb_gguf_find_tensor(g, "blk.0.attn_q.weight")->dtype, RB_Q4_0);
        rb_gguf_close(g);
        r = run(env, ARGS("tokenize", "-m", q), "Hello world", 11);
        run_out r2 = run(env, ARGS("tokenize", "-m", hf), "Hello world", 11);
        assert_int_equal(r.rc, 0);
        assert_string_equal(r.out, r2.out);
        run_free(&r);
        run_free(&r2);
        remove(q);
        remove(out);
        for (int f = 0; f < 4; f++) {
            snprintf(dst, sizeof dst, "%s/%s", hf, files[f]);
            remove(dst);
        }
        rmdir(hf);
    }
}

static void test_bad_input(void **state) {
    const cli_env *env = *state;
    char dir[1024], model[1024], path[2048], out[2048];
    tok_dir(dir, sizeof dir, "llama3");
    ct_model_dir(model, sizeof model, "llama_mha");
    snprintf(out, sizeof out, "%s/bad.gguf", env->tmp);
    expect_fail(env, ARGS("tokenize", "-m", "/nonexistent/model.gguf"), "hi", 1, "/nonexistent/model.gguf");
    expect_fail(env, ARGS("tokenize"), "hi", 2, "usage");
    expect_fail(env, ARGS("detokenize", "-m", dir), "[1, two]", 1, "unexpected 't'");
    expect_fail(env, ARGS("detokenize", "-m", dir), "[1, 2", 1, "not closed");
    expect_fail(env, ARGS("detokenize", "-m", dir), "[1 2]", 1, "unexpected");
    expect_fail(env, ARGS("detokenize", "-m", dir), "99999999999", 1, "too large");
    expect_fail(env, ARGS("detokenize", "-m", dir), "[5000000]", 1, "");
    expect_fail(env, ARGS("chat-render", "-m", dir), "this is not json", 1, "not valid JSON");
    expect_fail(env, ARGS("chat-render", "-m", dir), "{\"role\": \"user\"}", 1, "JSON array");
    expect_fail(env, ARGS("chat-render", "-m", dir), "[{\"content\": \"hi\"}]", 1, "JSON array");
    expect_fail(env, ARGS("chat-render", "-m", "/nonexistent"), "[]", 1, "does not exist");
    tok_dir(path, sizeof path, "llama2"); /* its tokenizer_config.json has no chat_template */
    expect_fail(env, ARGS("chat-render", "-m", path), "[{\"role\":\"user\",\"content\":\"hi\"}]", 1, "chat template");
    expect_fail(env, ARGS("convert", model, "-o", out, "--type", "q9_9"), "", 2, "unknown --type 'q9_9'");
    expect_fail(env, ARGS("convert", model, "-o", out, "--type", "q8_1"), "", 2, "f32, f16, bf16");
    expect_fail(env, ARGS("convert", model), "", 2, "usage");
    expect_fail(env, ARGS("convert", "/nonexistent/hf", "-o", out), "", 1, "/nonexistent/hf");
    expect_fail(env, ARGS("quantize", "/nonexistent.gguf", out, "q8_0"), "", 1, "nonexistent.gguf");
    expect_fail(env, ARGS("quantize", "/nonexistent.gguf", out, "q3_x"), "", 2, "unknown type 'q3_x'");
    expect_fail(env, ARGS("no-such-command"), "", 2, "unknown command");

    /* HF folder with an unknown model_type */
    char hf[1400];
    snprintf(hf, sizeof hf, "%s/hf_bad", env->tmp);
    assert_int_equal(mkdir(hf, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", hf);
    ct_write_text(path, "{\"model_type\": \"gpt_neox\", \"hidden_size\": 64}");
    expect_fail(env, ARGS("convert", hf, "-o", out), "", 1, "supported: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, phi3, olmo2, gpt_oss");
    /* ... and with a tensor missing */
    ct_copy_hf(model, hf, "model.layers.1.self_attn.o_proj.weight", NULL);
    expect_fail(env, ARGS("convert", hf, "-o", out, "--type", "f32"), "", 1,
                "missing tensor 'model.layers.1.self_attn.o_proj.weight'");
    struct stat st;
    assert_int_not_equal(stat(out, &st), 0);
    ct_rmtree(hf);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_RBEE\n", argv[0]);
        return 2;
    }
    cli_env env = {.rbee = argv[1]};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_bad_input, setup, teardown, &env),
        cmocka_unit_test_prestate_setup_teardown(test_tokenize_from_folders, setup, teardown, &env),
        cmocka_unit_test_prestate_setup_teardown(test_convert_then_use_gguf, setup, teardown, &env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
