/* HIP build of ops_linear.cu: CMake cannot compile one file as both CUDA and HIP,
 * so the ROCm library compiles this wrapper, which includes the CUDA source. */
#include "backends/gpu/matmul/ops_linear.cu"
