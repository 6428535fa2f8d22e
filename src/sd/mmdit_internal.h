/* The MMDiT's weights and state, shared by its loader (mmdit.c) and its
 * forward pass (mmdit_forward.c). */
#ifndef RBEE_SD_MMDIT_INTERNAL_H
#define RBEE_SD_MMDIT_INTERNAL_H

#include "rbee/sd_mmdit.h"
#include "sd/sd_arena.h"
#include "sd/sd_blocks.h"
#include "sd/sd_weights.h"

/* q/k/v/out projections of one attention; norm_q/norm_k (per head, [head_dim]) with qk_norm. */
typedef struct mmdit_attn {
    sd_linear q, k, v, o;
    rb_tensor nq, nk;
} mmdit_attn;

typedef struct mmdit_block {
    sd_linear mod_x, mod_c;   /* norm1.linear [D -> 6D or 9D], norm1_context.linear [D -> 6D or 2D] */
    mmdit_attn x, c, x2;      /* the image stream (to_*), the text stream (add_*_proj, to_add_out), attn2 */
    sd_linear ff1, ff2;       /* ff.net.0.proj [D -> 4D], ff.net.2 [4D -> D] */
    sd_linear cff1, cff2;     /* ff_context */
    bool pre_only;            /* the last block: the text stream stops after attention */
    bool dual;                /* attn2 present */
} mmdit_block;

struct rb_mmdit {
    rb_mmdit_config cfg;
    rb_backend *be;
    sd_weights ws;
    sd_scratch scratch;
    int64_t dim; /* D */
    sd_conv patch;        /* pos_embed.proj: [P, P, Cin, D] */
    rb_tensor pos;        /* pos_embed.pos_embed: [D, M*M] */
    sd_linear t1, t2;     /* time_text_embed.timestep_embedder.linear_1 / 2 */
    sd_linear p1, p2;     /* time_text_embed.text_embedder.linear_1 / 2 */
    sd_linear ctx_emb;    /* context_embedder */
    mmdit_block *blocks;
    sd_linear norm_out;   /* norm_out.linear [D -> 2D]: scale then shift */
    sd_linear proj_out;   /* [D -> P*P*Cout] */
};

#endif
