# Matmul, quantized dot products and per-ISA kernels. The ISA-specific files
# are compiled with their own -m flags and selected at run time through the
# kernel table (cpu_kernels.h); nothing else is built with those flags.
set(_rb_mm_dir ${CMAKE_CURRENT_SOURCE_DIR})
list(APPEND RB_CPU_SOURCES
  ${_rb_mm_dir}/cpu_isa.c
  ${_rb_mm_dir}/matmul.c
  ${_rb_mm_dir}/matmul_plan.c
  ${_rb_mm_dir}/kernels_scalar.c
  ${_rb_mm_dir}/quantize_act_scalar.c
  ${_rb_mm_dir}/vec_dot_legacy_scalar.c
  ${_rb_mm_dir}/vec_dot_kquant_scalar.c
  ${_rb_mm_dir}/vec_dot_iq4_scalar.c
  ${_rb_mm_dir}/vec_dot_iq3_scalar.c
  ${_rb_mm_dir}/vec_dot_iq2_scalar.c
  ${_rb_mm_dir}/vec_dot_iq1_scalar.c
)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set(_rb_avx2_files
    ${_rb_mm_dir}/kernels_avx2.c
    ${_rb_mm_dir}/quantize_act_avx2.c
    ${_rb_mm_dir}/vec_dot_legacy_avx2.c
    ${_rb_mm_dir}/vec_dot_kquant_avx2.c
    ${_rb_mm_dir}/vec_dot_q4_K_tile_avx2.c
    ${_rb_mm_dir}/vec_dot_mxfp4_avx2.c
    ${_rb_mm_dir}/vec_dot_iq4_avx2.c)
  set(_rb_avx512_files
    ${_rb_mm_dir}/kernels_avx512.c
    ${_rb_mm_dir}/vec_dot_vnni_avx512.c
    ${_rb_mm_dir}/matvec_vnni_avx512.c
    ${_rb_mm_dir}/gemm_packed_vnni_avx512.c
    ${_rb_mm_dir}/gemm_float_t_avx512.c
    ${_rb_mm_dir}/matvec_kquant_avx512.c
    ${_rb_mm_dir}/gemm_kquant_vnni_avx512.c
    ${_rb_mm_dir}/pack_kquant_avx512.c
    ${_rb_mm_dir}/vec_dot_mxfp4_avx512.c
    ${_rb_mm_dir}/vec_dot_iq4_avx512.c)
  list(APPEND RB_CPU_SOURCES ${_rb_avx2_files} ${_rb_avx512_files})
  set_source_files_properties(${_rb_avx2_files} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${_rb_avx512_files} PROPERTIES COMPILE_OPTIONS
    "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
  set_source_files_properties(${_rb_mm_dir}/cpu_isa.c PROPERTIES COMPILE_DEFINITIONS
    "RBEE_CPU_HAVE_AVX2=1;RBEE_CPU_HAVE_AVX512=1")
endif()
