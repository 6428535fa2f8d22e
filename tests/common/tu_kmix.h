/* A random 16-layer llama GGUF of width 256 in a Q4_K_M-style k-quant mix
 * (tu_kmix.c), for tests of loaders and forward passes that treat layers of
 * different weight types differently. */
#ifndef RBEE_TU_KMIX_H
#define RBEE_TU_KMIX_H

#include <stdbool.h>
#include <stddef.h>

#define TU_KMIX_LAYERS 16

/* llama-quantize's rule: layer il of n gets q6_K attn_v and ffn_down */
bool tu_kmix_more_bits(int il, int n);

/* Writes the model to a new temporary file and puts its path in path (the
 * caller unlinks it); fails the test on error. */
void tu_write_kquant_mix(char *path, size_t cap);

#endif
