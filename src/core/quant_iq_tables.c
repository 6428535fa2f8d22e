/* Constant tables of ggml's "IQ" (non-linear / lattice) quant formats: they
 * are part of the file format, so a decoder must use exactly these values.
 * iq4_nl and iq4_xs map each 4-bit index to one of 16 fixed int8 levels
 * (a non-uniform grid, denser near zero); the value is level * scale. */
#include "rbee/quant.h"

const int8_t rb_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
