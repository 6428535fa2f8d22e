/* Validation of an OpenAI embeddings body into an llm_embed_request: input
 * (a string, an array of strings, an array of token ids or an array of
 * such arrays), encoding_format ("float" or "base64"), dimensions (only the
 * model's own), model; strings are tokenized as a /v1/completions prompt
 * is (BOS as the tokenizer adds it, special-token text as plain text).
 * Every problem goes to errs, each naming its field. */
#ifndef RBEE_LLM_EMBED_H
#define RBEE_LLM_EMBED_H

#include "rbee/tokenizer.h"
#include "worker/wk_request.h"
#include "worker_llm/llm_job.h"

typedef struct llm_embed_ctx {
    const rb_tokenizer *tok;
    int64_t ctx_size; /* an input's tokens must fit one sequence slot */
    int64_t n_vocab;  /* token ids below this */
    int64_t n_embd;   /* the only dimensions accepted */
    llm_pooling pooling;
} llm_embed_ctx;

/* Fills *req (free it with llm_embed_request_free either way); *model gets
 * the client's model name (borrowed from body) or NULL. */
void llm_embed_read(const llm_embed_ctx *c, json_t *body, llm_embed_request *req, const char **model, wk_errors *errs);

#endif
