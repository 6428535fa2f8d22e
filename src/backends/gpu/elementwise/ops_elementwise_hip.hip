/* HIP build of ops_elementwise.cu: CMake cannot compile one file as both CUDA and HIP,
 * so the ROCm library compiles this wrapper, which includes the CUDA source. */
#include "backends/gpu/elementwise/ops_elementwise.cu"
