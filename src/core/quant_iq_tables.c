/* Constant tables of ggml's "IQ" (non-linear / lattice) quant formats: they
 * are part of the file format, so a decoder must use exactly these values.
 * iq4_nl and iq4_xs map each 4-bit index to one of 16 fixed int8 levels
 * (a non-uniform grid, denser near zero); the value is level * scale.
 * iq3_xxs and iq3_s pick groups of 4 magnitudes from a fixed set of lattice
 * points (256 and 512 of the 8^4 combinations of 8 levels); each point is
 * stored here as four 3-bit level indices (bits 3j..3j+2: the level of the
 * group's element j), expanded through the format's 8 levels. iq2_xxs and
 * iq2_xs do the same with runs of 8 magnitudes from 3 levels (256 and 512
 * points, eight 2-bit level indices each), and iq2_s with 1024 points.
 * iq1_s and iq1_m share one grid of 2048 runs of 8 values from -1, 0, +1
 * (eight 2-bit indices k of the values k - 1). */
#include "core/quant_iq_grids.h"
#include "rbee/quant.h"

const int8_t rb_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

const uint8_t rb_iq3xxs_levels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
const uint8_t rb_iq3s_levels[8] = {1, 3, 5, 7, 9, 11, 13, 15};

const uint16_t rb_iq3xxs_grid[256] = {RB_IQ3XXS_GRID};

const uint16_t rb_iq3s_grid[512] = {RB_IQ3S_GRID};

const uint8_t rb_iq2_levels[3] = {8, 25, 43};

const uint16_t rb_iq2xxs_grid[256] = {RB_IQ2XXS_GRID};

const uint16_t rb_iq2xs_grid[512] = {RB_IQ2XS_GRID};

const uint16_t rb_iq2s_grid[1024] = {RB_IQ2S_GRID};

const uint16_t rb_iq1s_grid[2048] = {RB_IQ1S_GRID};
