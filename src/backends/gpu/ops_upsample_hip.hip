/* HIP build of ops_upsample.cu: CMake cannot compile one file as both CUDA and HIP,
 * so the ROCm library compiles this wrapper, which includes the CUDA source. */
#include "backends/gpu/ops_upsample.cu"
