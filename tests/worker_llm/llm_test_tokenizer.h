/* Shared by the worker's chat tests: the bundled model's tokenizer with
 * another chat template, so a test renders a real template through the
 * worker's path without a model folder of its own. */
#ifndef RBEE_LLM_TEST_TOKENIZER_H
#define RBEE_LLM_TEST_TOKENIZER_H

#include "rbee/tokenizer.h"

/* The default tokenizer with tokenizer_config.json's chat_template set to
 * tpl (bos <|begin_of_text|>, eos <|end_of_text|>); fails the test on error. */
rb_tokenizer *llm_test_tokenizer_with_template(const char *tpl);

#endif
