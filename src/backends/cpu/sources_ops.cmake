# CPU backend object, thread pool and the non-matmul op kernels.
list(APPEND RB_CPU_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/cpu_backend.c
  ${CMAKE_CURRENT_SOURCE_DIR}/threadpool.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_common.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_elementwise.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_cast.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_reduce.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_index.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_sort.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_rope.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_attention.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_attention_gemm.c
  ${CMAKE_CURRENT_SOURCE_DIR}/llamacpp_numerics.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_conv.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_conv_gemm.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_upsample.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ops_moe.c
)
