/* Seed corpus generator for the fuzz targets: writes small valid GGUF files
 * (through the library's writer), safetensors images, JSON configs, PNG /
 * JPEG files (through the image encoders), small tokenizer.json files with a
 * text to encode, the real chat templates of DATADIR/chat/NAME.json with a
 * conversation each, and worker requests into
 * OUTDIR/{gguf,safetensors,json_config,image,tokenizer_json,chat_template,
 * worker_request}, and the Stable Diffusion seeds of gen_seeds_sd.c.
 * Usage: fuzz_gen_seeds OUTDIR [DATADIR] */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rbee/gguf.h"
#include "rbee/image.h"

#include <dirent.h>
#include <jansson.h>

int sd_seeds(const char *dir); /* gen_seeds_sd.c */

static int make_dir(const char *p) { return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1; }

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int gguf_seed(const char *path, int variant) {
    rb_gguf_writer *w = NULL;
    rb_error err;
    if (rb_gguf_writer_create(&w, &err) != RB_OK) return -1;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
    static const float scores[] = {0.0f, 0.0f, 0.0f, -1.0f, -2.0f, -3.0f};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1};
    rb_gguf_writer_set_str(w, "general.architecture", "llama");
    rb_gguf_writer_set_u32(w, "llama.block_count", 1);
    rb_gguf_writer_set_u32(w, "llama.embedding_length", 32);
    rb_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rb_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    rb_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    rb_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RB_GGUF_FLOAT32, scores, 6);
    rb_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RB_GGUF_INT32, types, 6);
    if (variant == 1) {
        rb_gguf_writer_set_u8(w, "x.u8", 1);
        rb_gguf_writer_set_i8(w, "x.i8", -1);
        rb_gguf_writer_set_u16(w, "x.u16", 2);
        rb_gguf_writer_set_i16(w, "x.i16", -2);
        rb_gguf_writer_set_i32(w, "x.i32", -3);
        rb_gguf_writer_set_u64(w, "x.u64", 4);
        rb_gguf_writer_set_i64(w, "x.i64", -5);
        rb_gguf_writer_set_f64(w, "x.f64", 0.5);
    }
    float f32[64];
    for (int i = 0; i < 64; i++) f32[i] = (float)i * 0.25f - 3.0f;
    uint8_t q[34 * 2];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 37);
    const int64_t ne_a[2] = {8, 4}, ne_b[1] = {32}, ne_q[2] = {32, 2}, ne_h[1] = {16};
    if (variant != 2) {
        rb_gguf_writer_add_tensor(w, "token_embd.weight", RB_F32, 2, ne_a, f32, 128);
        rb_gguf_writer_add_tensor(w, "output_norm.weight", RB_F32, 1, ne_b, f32, 128);
        rb_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", RB_Q8_0, 2, ne_q, q, 68);
        rb_gguf_writer_add_tensor(w, "blk.0.h", RB_F16, 1, ne_h, q, 32);
    }
    rb_status st = rb_gguf_writer_write(w, path, variant == 1 ? 64 : 0, &err);
    rb_gguf_writer_free(w);
    if (st != RB_OK) fprintf(stderr, "%s\n", err.msg);
    return st == RB_OK ? 0 : -1;
}

static int st_seed(const char *path, const char *json, size_t data_len) {
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8, n = 8 + padded + data_len;
    uint8_t *p = calloc(1, n);
    if (!p) return -1;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(p + 8, json, jl);
    memset(p + 8 + jl, ' ', padded - jl);
    for (size_t i = 0; i < data_len; i++) p[8 + padded + i] = (uint8_t)(i * 11);
    int r = write_bytes(path, p, n);
    free(p);
    return r;
}

/* Small PNGs (gray, RGB with text chunks, RGBA) and JPEGs (gray, RGB) from the image encoders. */
static int image_seeds(const char *dir) {
    static const int chans[5] = {1, 3, 4, 1, 3};
    const rb_png_text texts[2] = {{"parameters", "a cat\nSteps: 20, Seed: 1", 24},
                                  {"Title", "\xe6\x9d\xb1\xe4\xba\xac", 6}};
    int bad = 0;
    for (int i = 0; i < 5; i++) {
        rb_image img;
        if (rb_image_alloc(&img, 16 + i, 8, chans[i], NULL) != RB_OK) return -1;
        for (size_t k = 0; k < (size_t)img.width * img.height * img.channels; k++) img.data[k] = (uint8_t)(k * 7 + i);
        uint8_t *out = NULL;
        size_t n = 0;
        rb_png_encode_opts po = {.compression = 6, .texts = texts, .n_texts = i == 1 ? 2 : 0};
        rb_status st = i < 3 ? rb_png_encode(&img, &po, &out, &n, NULL) : rb_jpeg_encode(&img, 75, &out, &n, NULL);
        char p[4096];
        snprintf(p, sizeof p, "%s/image/seed%d.%s", dir, i, i < 3 ? "png" : "jpg");
        bad |= st != RB_OK || write_bytes(p, out, n) != 0;
        free(out);
        rb_image_free(&img);
    }
    return bad ? -1 : 0;
}

/* Writes a followed by a NUL byte and b (the two-part inputs of the text targets). */
static int write_pair(const char *path, const char *a, size_t an, const char *b, size_t bn) {
    char *p = malloc(an + 1 + bn);
    if (!p) return -1;
    memcpy(p, a, an);
    p[an] = '\0';
    memcpy(p + an + 1, b, bn);
    int r = write_bytes(path, p, an + 1 + bn);
    free(p);
    return r;
}

/* tokenizer.json pipelines the loader reads: byte-level (regex split,
 * template post-processor), SentencePiece-style (prepend/replace
 * normalizers, byte fallback, metaspace) and added-token flags with NFC. */
static const char *const k_tokenizers[] = {
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\u0120\":3,\"ab\":4,\"\u0120a\":5},"
    "\"merges\":[\"a b\",\"\u0120 a\"]},\"added_tokens\":[{\"id\":6,\"content\":\"<|eot_id|>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
    "\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},\"post_processor\":{\"type\":"
    "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|eot_id|>\",\"type_id\":0}},{\"Sequence\":"
    "{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|eot_id|>\":{\"id\":\"<|eot_id|>\",\"ids\":[6]}}}}",
    "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"fuse_unk\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0xE2>\":4,\"\u2581\":5,\"a\":6,\"\u2581a\":7},"
    "\"merges\":[[\"\u2581\",\"a\"]]},\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"rstrip\":true}],\"normalizer\":{\"type\":\"Sequence\","
    "\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\u2581\"},{\"type\":\"Replace\",\"pattern\":"
    "{\"String\":\" \"},\"content\":\"\u2581\"}]},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
    "\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":"
    "\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}",
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0,\"y\":1,\" \":2,\"xy\":3},\"merges\":[\"x y\"],"
    "\"ignore_merges\":true},\"added_tokens\":[{\"id\":4,\"content\":\"<tool>\",\"special\":false},"
    "{\"id\":5,\"content\":\"<ls>\",\"special\":true,\"lstrip\":true,\"single_word\":true},{\"id\":6,"
    "\"content\":\"y#\",\"normalized\":true,\"special\":true}],\"normalizer\":{\"type\":\"Sequence\","
    "\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[0-9]+\"},\"content\":"
    "\"#\"},{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":false}]},\"pre_tokenizer\":{\"type\":"
    "\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\",\"split\":true}}",
};
static const char k_tok_text[] = "ab c<|eot_id|> a\n\xe2\x82\xac </s><s> xy1 <tool> <ls>y7 e\xcc\x81";

/* Worker requests in the target's framing (method, url, headers, body). */
static const char *const k_requests[] = {
    "POST /v1/chat/completions\nAuthorization: Bearer secret-token\nContent-Type: application/json\n\n"
    "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
    "[{\"type\":\"text\",\"text\":\"hi <|im_end|>\"}]}],\"max_tokens\":4,\"temperature\":0.5,\"stop\":[\"x\"]}",
    "POST /v1/completions\nAuthorization: Bearer secret-token\nContent-Length: 60\n\n"
    "{\"prompt\":[\"the cat\"],\"max_tokens\":3,\"logprobs\":2,\"seed\":7,\"stream\":true}",
    "POST /v1/jobs\nAuthorization: Bearer secret-token\n\n{\"operation\":\"infer\",\"prompt\":\"the\",\"top_k\":3}",
    "POST /v1/chat/completions\nAuthorization: Bearer secret-token\n\n"
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":3,\"logprobs\":true,\"top_logprobs\":5,"
    "\"logit_bias\":{\"12\":-100,\"3\":2.5},\"max_completion_tokens\":4}",
    "POST /v1/embeddings\nAuthorization: Bearer secret-token\n\n"
    "{\"input\":[\"the cat\",[5,6,7]],\"encoding_format\":\"base64\",\"dimensions\":8}",
    "OPTIONS /v1/chat/completions\nOrigin: https://b.example\nAccess-Control-Request-Method: POST\n"
    "Access-Control-Request-Headers: authorization, content-type\n\n",
    "GET /v1/jobs/job-1/stream\nAuthorization: bearer  secret-token \n\n",
    "DELETE /health\nTransfer-Encoding: chunked\nContent-Length: 5\n\n",
};

/* The real chat templates of DATADIR/chat/NAME.json, each with its first
 * conversation and extra variables. */
static int chat_seeds(const char *data, const char *out) {
    char p[4096];
    snprintf(p, sizeof p, "%s/chat", data);
    DIR *d = opendir(p);
    if (!d) return -1;
    int bad = 0, n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        snprintf(p, sizeof p, "%s/chat/%s", data, e->d_name);
        json_t *j = json_load_file(p, 0, NULL);
        const json_t *t = json_object_get(j, "template"), *c = json_array_get(json_object_get(j, "cases"), 0);
        char *m = c ? json_dumps(json_object_get(c, "messages"), JSON_COMPACT) : NULL;
        char *x = c ? json_dumps(json_object_get(c, "extra"), JSON_COMPACT) : NULL;
        if (json_is_string(t) && m && x) {
            size_t ml = strlen(m), xl = strlen(x);
            char *mx = malloc(ml + 1 + xl);
            if (mx) {
                memcpy(mx, m, ml);
                mx[ml] = '\0';
                memcpy(mx + ml + 1, x, xl);
                snprintf(p, sizeof p, "%s/chat_template/%.*s", out, (int)(l - 5), e->d_name);
                bad |= write_pair(p, json_string_value(t), json_string_length(t), mx, ml + 1 + xl);
                free(mx);
                n++;
            }
        }
        free(m);
        free(x);
        json_decref(j);
    }
    closedir(d);
    return bad || n == 0 ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s OUTDIR [DATADIR]\n", argv[0]);
        return 2;
    }
    char p[4096];
    int bad = make_dir(argv[1]);
    static const char *const sub[] = {"gguf", "safetensors", "json_config", "image", "tokenizer_json",
                                      "chat_template", "worker_request"};
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/%s", argv[1], sub[i]);
        bad |= make_dir(p);
    }
    for (int v = 0; v < 3; v++) {
        snprintf(p, sizeof p, "%s/gguf/seed%d.gguf", argv[1], v);
        bad |= gguf_seed(p, v);
    }
    snprintf(p, sizeof p, "%s/safetensors/seed0.safetensors", argv[1]);
    bad |= st_seed(p,
                   "{\"__metadata__\":{\"format\":\"pt\"},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                   "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]}}",
                   40);
    snprintf(p, sizeof p, "%s/safetensors/seed1.safetensors", argv[1]);
    bad |= st_seed(p,
                   "{\"m.w\":{\"dtype\":\"F16\",\"shape\":[1,2,2,2],\"data_offsets\":[0,16]},"
                   "\"m.z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]},"
                   "\"m.b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]}}",
                   19);
    static const char *const configs[] = {
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,\"rms_norm_eps\":1e-05,"
        "\"rope_scaling\":{\"factor\":8.0,\"type\":\"llama3\"},\"eos_token_id\":[128001,128009],"
        "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"bos_token_id\":null}",
        "{\"a\":{\"b\":{\"c\":1}},\"a.b\":{\"c\":2},\"x\":{\"y\":[1,2.5,\"s\",true,null,{}]}}",
    };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/json_config/seed%d.json", argv[1], i);
        bad |= write_bytes(p, configs[i], strlen(configs[i]));
    }
    bad |= image_seeds(argv[1]);
    bad |= sd_seeds(argv[1]);
    for (size_t i = 0; i < sizeof k_tokenizers / sizeof *k_tokenizers; i++) {
        snprintf(p, sizeof p, "%s/tokenizer_json/seed%zu", argv[1], i);
        bad |= write_pair(p, k_tokenizers[i], strlen(k_tokenizers[i]), k_tok_text, sizeof k_tok_text - 1);
    }
    for (size_t i = 0; i < sizeof k_requests / sizeof *k_requests; i++) {
        snprintf(p, sizeof p, "%s/worker_request/seed%zu", argv[1], i);
        bad |= write_bytes(p, k_requests[i], strlen(k_requests[i]));
    }
    static const char tpl[] = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content|trim }}"
                              "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    static const char msgs[] = "[{\"role\":\"user\",\"content\":\" hi \"}]";
    snprintf(p, sizeof p, "%s/chat_template/chatml", argv[1]);
    bad |= write_pair(p, tpl, sizeof tpl - 1, msgs, sizeof msgs - 1);
    if (argc == 3) bad |= chat_seeds(argv[2], argv[1]);
    if (bad) fprintf(stderr, "fuzz_gen_seeds: failed to write some seeds under %s\n", argv[1]);
    return bad ? 1 : 0;
}
