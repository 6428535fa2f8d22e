/* `rbee generate -m MODEL -p TEXT [sampling flags]`: tokenizes the prompt,
 * streams the generated text to stdout, and prints prefill and decode
 * tokens/s to stderr at the end. */
#include "cli_common.h"
#include "commands.h"

#include "cli_grammar.h"
#include "rbee/generate.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: rbee generate -m MODEL -p TEXT [options]\n\n"
            "  -n, --max-tokens N        tokens to generate (default 128)\n"
            "  --temp T                  temperature, 0 = greedy (default 0)\n"
            "  --top-k K  --top-p P  --min-p P\n"
            "  --repeat-penalty R  --frequency-penalty F  --presence-penalty P  --repeat-last-n N\n"
            "  --seed S                  sampling seed (default 0)\n"
            "  --stop TEXT               stop string (repeatable, up to %d)\n"
            "  -c, --ctx N               context size (default: prompt + max tokens)\n"
            "  --ignore-eos              keep generating past end-of-sequence tokens\n"
            "  --grammar FILE            constrain the output to a GBNF grammar (rule root)\n"
            "  --json-schema FILE        constrain the output to JSON valid for a JSON schema\n"
            "  --backend SPEC  --threads N\n",
            RB_GEN_MAX_STOP);
}

static bool on_text(void *user, const char *text, size_t len, int32_t token) {
    (void)user;
    (void)token;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return true;
}

enum { OPT_TOPK = 1000, OPT_TOPP, OPT_MINP, OPT_REP, OPT_FREQ, OPT_PRES, OPT_LASTN, OPT_SEED, OPT_STOP, OPT_TEMP,
       OPT_IGNORE_EOS, OPT_BACKEND, OPT_THREADS, OPT_GRAMMAR, OPT_SCHEMA };

int rb_cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *backend = NULL, *grammar_path = NULL, *schema_path = NULL;
    int64_t threads = 0, ctx = 0, iv = 0;
    double fv = 0;
    rb_gen_params gp = rb_gen_default_params();
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"prompt", required_argument, 0, 'p'},
        {"max-tokens", required_argument, 0, 'n'},   {"ctx", required_argument, 0, 'c'},
        {"temp", required_argument, 0, OPT_TEMP},    {"top-k", required_argument, 0, OPT_TOPK},
        {"top-p", required_argument, 0, OPT_TOPP},   {"min-p", required_argument, 0, OPT_MINP},
        {"repeat-penalty", required_argument, 0, OPT_REP},
        {"frequency-penalty", required_argument, 0, OPT_FREQ},
        {"presence-penalty", required_argument, 0, OPT_PRES},
        {"repeat-last-n", required_argument, 0, OPT_LASTN},
        {"seed", required_argument, 0, OPT_SEED},    {"stop", required_argument, 0, OPT_STOP},
        {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
        {"grammar", required_argument, 0, OPT_GRAMMAR}, {"json-schema", required_argument, 0, OPT_SCHEMA},
        {"backend", required_argument, 0, OPT_BACKEND}, {"threads", required_argument, 0, OPT_THREADS},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': if (!cli_parse_int("--max-tokens", optarg, 1, 1 << 24, &gp.max_tokens)) return 2; break;
        case 'c': if (!cli_parse_int("--ctx", optarg, 1, 1 << 24, &ctx)) return 2; break;
        case OPT_TEMP: if (!cli_parse_float("--temp", optarg, 0, 100, &fv)) return 2; gp.sampling.temperature = (float)fv; break;
        case OPT_TOPK: if (!cli_parse_int("--top-k", optarg, 0, 1 << 24, &iv)) return 2; gp.sampling.top_k = (int)iv; break;
        case OPT_TOPP: if (!cli_parse_float("--top-p", optarg, 0, 1, &fv)) return 2; gp.sampling.top_p = (float)fv; break;
        case OPT_MINP: if (!cli_parse_float("--min-p", optarg, 0, 1, &fv)) return 2; gp.sampling.min_p = (float)fv; break;
        case OPT_REP: if (!cli_parse_float("--repeat-penalty", optarg, 1e-3, 100, &fv)) return 2; gp.sampling.repetition_penalty = (float)fv; break;
        case OPT_FREQ: if (!cli_parse_float("--frequency-penalty", optarg, -2, 2, &fv)) return 2; gp.sampling.frequency_penalty = (float)fv; break;
        case OPT_PRES: if (!cli_parse_float("--presence-penalty", optarg, -2, 2, &fv)) return 2; gp.sampling.presence_penalty = (float)fv; break;
        case OPT_LASTN: if (!cli_parse_int("--repeat-last-n", optarg, -1, 1 << 24, &iv)) return 2; gp.sampling.penalty_last_n = (int)iv; break;
        case OPT_SEED: if (!cli_parse_int("--seed", optarg, 0, INT64_MAX, &iv)) return 2; gp.sampling.seed = (uint64_t)iv; break;
        case OPT_STOP:
            if (gp.n_stop == RB_GEN_MAX_STOP || !*optarg) {
                fprintf(stderr, "error: at most %d non-empty --stop strings\n", RB_GEN_MAX_STOP);
                return 2;
            }
            gp.stop[gp.n_stop++] = optarg;
            break;
        case OPT_IGNORE_EOS: gp.ignore_eos = true; break;
        case OPT_GRAMMAR: grammar_path = optarg; break;
        case OPT_SCHEMA: schema_path = optarg; break;
        case OPT_BACKEND: backend = optarg; break;
        case OPT_THREADS: if (!cli_parse_int("--threads", optarg, 0, 1024, &threads)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || !prompt || optind != argc) {
        usage(stderr);
        return 2;
    }
    rb_grammar *grammar = NULL;
    if (!cli_load_grammar(grammar_path, schema_path, &grammar)) return 2;
    gp.grammar = grammar;
    cli_model cm;
    if (!cli_open_model(model, backend, (int)threads, true, &cm)) {
        rb_grammar_free(grammar);
        return 1;
    }
    int rc = 1;
    rb_error err;
    rb_error_clear(&err);
    int32_t *ids = NULL;
    size_t n = 0;
    rb_kv_cache *kv = NULL;
    if (rb_tokenizer_encode(cm.tok, prompt, strlen(prompt), RB_TOK_ADD_SPECIAL | RB_TOK_PARSE_SPECIAL, &ids, &n,
                            &err) != RB_OK)
        goto done;
    if (ctx <= 0) {
        ctx = (int64_t)n + gp.max_tokens;
        const rb_model_config *cfg = rb_model_get_config(cm.model);
        if (cfg->n_ctx_train > 0 && ctx > cfg->n_ctx_train) ctx = cfg->n_ctx_train;
    }
    if (rb_kv_cache_create(cm.model, ctx, RB_F16, &kv, &err) != RB_OK) goto done;
    rb_gen_result res;
    if (rb_generate(cm.model, cm.tok, kv, ids, n, &gp, on_text, NULL, &res, &err) != RB_OK) goto done;
    printf("\n");
    fprintf(stderr, "\n[%s] prefill: %lld tokens in %.1f ms (%.1f t/s); decode: %lld tokens in %.1f ms (%.1f t/s)\n",
            rb_stop_reason_name(res.stop_reason), (long long)res.n_prompt, res.prefill_ms,
            res.prefill_ms > 0 ? 1e3 * (double)res.n_prompt / res.prefill_ms : 0.0, (long long)res.n_generated,
            res.decode_ms, res.decode_ms > 0 && res.n_generated > 1 ? 1e3 * (double)(res.n_generated - 1) / res.decode_ms : 0.0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", err.msg);
    free(ids);
    rb_kv_cache_free(kv);
    cli_close_model(&cm);
    rb_grammar_free(grammar);
    return rc;
}
