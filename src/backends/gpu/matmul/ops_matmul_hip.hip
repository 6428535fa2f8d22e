/* HIP build of ops_matmul.cu: CMake cannot compile one file as both CUDA and HIP,
 * so the ROCm library compiles this wrapper, which includes the CUDA source. */
#include "backends/gpu/matmul/ops_matmul.cu"
