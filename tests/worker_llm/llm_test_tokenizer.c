/* Implementation of llm_test_tokenizer.h. */
#include "llm_test_tokenizer.h"

#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

rb_tokenizer *llm_test_tokenizer_with_template(const char *tpl) {
    size_t jl = 0;
    char *tj = tu_read_file(RBEE_DEFAULT_MODEL_DIR "/hf/tokenizer.json", &jl);
    json_t *cfg = json_pack("{s:s, s:s, s:s}", "bos_token", "<|begin_of_text|>", "eos_token", "<|end_of_text|>",
                            "chat_template", tpl);
    char *cj = json_dumps(cfg, 0);
    rb_tokenizer *tok = NULL;
    rb_error e;
    if (rb_tokenizer_load_hf_memory(tj, jl, cj, strlen(cj), &tok, &e) != RB_OK) fail_msg("%s", e.msg);
    free(cj);
    json_decref(cfg);
    free(tj);
    return tok;
}
