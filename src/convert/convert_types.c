/* Which types `rbee convert` / `rbee quantize` can produce, the llama.cpp
 * file-type id of each, the type each weight gets (mxfp4 is llama.cpp's
 * MXFP4_MOE: expert stacks in mxfp4, other matrices in q8_0), and the f16
 * fallback for rows that are not whole blocks. */
#include "convert/convert.h"

typedef struct type_entry {
    rb_dtype type;
    uint32_t ftype; /* llama.cpp enum llama_ftype */
} type_entry;

/* ftype ids as llama.cpp writes them (the k-quants as the _M variants that
 * llama-quantize records for a pure conversion). */
static const type_entry k_types[] = {
    {RB_F32, 0},   {RB_F16, 1},   {RB_BF16, 32}, {RB_Q4_0, 2},  {RB_Q4_1, 3},  {RB_Q5_0, 8},  {RB_Q5_1, 9},
    {RB_Q8_0, 7},  {RB_Q2_K, 10}, {RB_Q3_K, 12}, {RB_Q4_K, 15}, {RB_Q5_K, 17}, {RB_Q6_K, 18}, {RB_MXFP4, 38},
};

bool rb_convert_type_ok(rb_dtype t) {
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == t) return true;
    return false;
}

const char *rb_convert_type_list(void) {
    return "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4";
}

uint32_t rb_convert_file_type(rb_dtype t) {
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == t) return k_types[i].ftype;
    return 0;
}

rb_dtype rb_convert_intended_dtype(rb_dtype t, bool expert) {
    if (t == RB_MXFP4 && !expert) return RB_Q8_0;
    return t;
}

rb_dtype rb_convert_weight_dtype(rb_dtype t, int64_t ne0, bool expert) {
    const rb_dtype want = rb_convert_intended_dtype(t, expert);
    const rb_dtype_traits *tr = rb_dtype_info((int)want);
    if (!tr || ne0 <= 0) return RB_F16;
    return ne0 % tr->block_size == 0 ? want : RB_F16;
}
