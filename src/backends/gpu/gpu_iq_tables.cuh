/* The iq3_xxs / iq3_s, iq2_xxs / iq2_xs / iq2_s and iq1_s / iq1_m grids for
 * device code: core/quant_iq_grids.h's lists (each point's 3-bit or 2-bit
 * level indices, as the CPU's tables), kept in constant memory of each
 * translation unit that decodes iq blocks. */
#ifndef RBEE_GPU_IQ_TABLES_CUH
#define RBEE_GPU_IQ_TABLES_CUH

#include "core/quant_iq_grids.h"

#include <stdint.h>

namespace RB_GPU_NS {

static __constant__ uint16_t g_iq3xxs_grid[256] = {RB_IQ3XXS_GRID};

static __constant__ uint16_t g_iq3s_grid[512] = {RB_IQ3S_GRID};

static __constant__ uint16_t g_iq2xxs_grid[256] = {RB_IQ2XXS_GRID};

static __constant__ uint16_t g_iq2xs_grid[512] = {RB_IQ2XS_GRID};

static __constant__ uint16_t g_iq2s_grid[1024] = {RB_IQ2S_GRID};

static __constant__ uint16_t g_iq1s_grid[2048] = {RB_IQ1S_GRID};

} // namespace RB_GPU_NS

#endif
