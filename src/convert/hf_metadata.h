/* The GGUF metadata of a converted Hugging Face model: general.*, the
 * `{arch}.*` hyper-parameters llama.cpp's convert script writes, and the
 * tokenizer (tokenizer.ggml.*, tokenizer.chat_template) when the folder has
 * one. */
#ifndef RBEE_CONVERT_HF_METADATA_H
#define RBEE_CONVERT_HF_METADATA_H

#include "rbee/gguf.h"
#include "rbee/model.h"

#include <stdio.h>

/* GGUF architecture name of cfg (mistral is written as "llama", as llama.cpp does). */
const char *cv_gguf_arch(const rb_model_config *cfg);

/* general.* and {arch}.* keys. RB_E_UNSUPPORTED when cfg uses a feature GGUF
 * metadata cannot express (e.g. an unusual sliding-window layer layout). */
rb_status cv_write_model_kv(rb_gguf_writer *w, const rb_model_config *cfg, const char *name, rb_dtype type,
                            rb_error *err);

/* tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.*; a chat
 * template from tokenizer_config.json or chat_template.jinja. Nothing is
 * written for a folder without tokenizer files. */
rb_status cv_write_tokenizer_kv(rb_gguf_writer *w, const char *hf_dir, FILE *log, rb_error *err);

#endif
