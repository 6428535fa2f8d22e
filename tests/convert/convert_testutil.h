/* Helpers shared by the convert tests: scratch folders, writing safetensors
 * files and HF folders, listing the reference models, and running a model's
 * forward pass for logits. */
#ifndef RBEE_TEST_CONVERT_TESTUTIL_H
#define RBEE_TEST_CONVERT_TESTUTIL_H

#include "testutil.h"

#include "rbee/dtype.h"
#include "rbee/json_config.h"
#include "rbee/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A fresh folder under $TMPDIR (or /tmp); removed by ct_rmtree. */
void ct_tmpdir(char *buf, size_t len);
/* Removes the files of a flat folder and the folder itself. */
void ct_rmtree(const char *dir);
void ct_write_text(const char *path, const char *text);

/* One tensor of a safetensors file: shape in safetensors (row-major) order. */
typedef struct ct_st_entry {
    const char *name;
    const char *dtype; /* "F32", "F16", "BF16" */
    int n_dims; /* 1..3 */
    int64_t shape[3];
    const void *data;
    size_t nbytes;
} ct_st_entry;
void ct_write_safetensors(const char *path, const ct_st_entry *e, size_t n);

/* Copies src_dir's config.json into dst_dir and rewrites its safetensors
 * there without the tensor named drop (NULL: keep all) and with the tensor
 * named reshape (NULL: none) given a wrong shape (2-D: transposed, 3-D: the
 * two inner dimensions of the row-major shape swapped with the outer one). */
void ct_copy_hf(const char *src_dir, const char *dst_dir, const char *drop, const char *reshape);
/* Copies src_dir's config.json into dst_dir and rewrites every float tensor
 * of its safetensors in dtype (f16 or bf16, rounded to nearest even), as a
 * half-precision checkpoint of the same model. */
void ct_copy_hf_as(const char *src_dir, const char *dst_dir, rb_dtype dtype);

/* Absolute folder of tests/data/models/<name>. */
void ct_model_dir(char *buf, size_t len, const char *name);

/* Integer array `key` of a JSON config (malloc'ed). */
int32_t *ct_ids(const rb_json_config *j, const char *key, size_t *n);

/* Loads path (GGUF or HF folder) on the CPU and returns the logits of every
 * position (n * V floats, malloc'ed); *V receives the vocabulary size. With
 * greedy/n_greedy also checks the greedy continuation of prompt (prefill then
 * one token at a time) and returns false if it differs. */
float *ct_logits(const char *path, const int32_t *tokens, size_t n, int64_t *V);
bool ct_greedy_matches(const char *path, const int32_t *prompt, size_t np, const int32_t *want, size_t ng);

/* Opens a GGUF file; fails the test on error. */
rb_gguf *ct_gguf_open(const char *path);

#endif
