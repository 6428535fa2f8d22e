# Enables the GPU languages for the whole tree (CMake wants enable_language in
# the highest directory common to everything that links GPU code), included
# from the top-level CMakeLists.txt when RBEE_CUDA or RBEE_HIP is on.
#  - CUDA: default architectures 80;89;90 (override CMAKE_CUDA_ARCHITECTURES).
#  - HIP with Debian 12's clang-15 (see ../shared/notes/hip-on-debian12.md):
#    clang++-15 as the HIP compiler, a ROCm root whose lib/cmake/hip-lang links
#    to Debian's, the device-library path, and explicit architectures
#    gfx90a;gfx940;gfx1030;gfx1100. gfx1100 needs oclc_isa_version_1100.bc,
#    which Debian lacks: we derive it from the gfx1030 file (llvm-dis/llvm-as)
#    in a device-library folder of our own. gfx942 (MI300X) needs LLVM >= 16.
#  - RBEE_HIP with RBEE_HIP_NVIDIA: the HIP flavour (rbee_rocm) is compiled by
#    nvcc for NVIDIA through hip_on_nvidia.h instead of clang for AMD, so the
#    HIP host path runs on an NVIDIA GPU; CUDA is enabled (default sm_90) and
#    the HIP language is not.
option(RBEE_HIP_NVIDIA "With RBEE_HIP: build the ROCm backend for NVIDIA with nvcc (HIP's NVIDIA platform)" OFF)
if(RBEE_CUDA OR (RBEE_HIP AND RBEE_HIP_NVIDIA))
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    if(RBEE_CUDA)
      set(CMAKE_CUDA_ARCHITECTURES 80 89 90)
    else()
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()

if(RBEE_HIP AND NOT RBEE_HIP_NVIDIA)
  set(_rb_multiarch /usr/lib/x86_64-linux-gnu)
  if(NOT DEFINED CMAKE_HIP_COMPILER)
    find_program(_rb_clang15 clang++-15)
    if(_rb_clang15)
      set(CMAKE_HIP_COMPILER ${_rb_clang15})
    endif()
  endif()
  if(NOT DEFINED CMAKE_HIP_COMPILER_ROCM_ROOT AND EXISTS ${_rb_multiarch}/cmake/hip-lang)
    set(_rb_root ${CMAKE_BINARY_DIR}/rocm-root)
    file(MAKE_DIRECTORY ${_rb_root}/lib/cmake)
    if(NOT EXISTS ${_rb_root}/lib/cmake/hip-lang)
      file(CREATE_LINK ${_rb_multiarch}/cmake/hip-lang ${_rb_root}/lib/cmake/hip-lang SYMBOLIC)
    endif()
    set(CMAKE_HIP_COMPILER_ROCM_ROOT ${_rb_root})
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_rb_multiarch}/cmake)
  # the compiler checks run in try_compile projects, which see the environment
  set(ENV{CMAKE_PREFIX_PATH} "${_rb_multiarch}/cmake:$ENV{CMAKE_PREFIX_PATH}")
  if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES gfx90a gfx940 gfx1030 gfx1100)
  endif()
  # device libraries, plus a generated gfx1100 ISA-version file
  set(_rb_bc ${_rb_multiarch}/amdgcn/bitcode)
  set(_rb_devlib ${_rb_bc})
  if("gfx1100" IN_LIST CMAKE_HIP_ARCHITECTURES AND EXISTS ${_rb_bc}/oclc_isa_version_1030.bc
     AND NOT EXISTS ${_rb_bc}/oclc_isa_version_1100.bc)
    set(_rb_devlib ${CMAKE_BINARY_DIR}/amdgcn-bitcode)
    file(MAKE_DIRECTORY ${_rb_devlib})
    file(GLOB _rb_bcs ${_rb_bc}/*.bc)
    foreach(f ${_rb_bcs})
      get_filename_component(n ${f} NAME)
      if(NOT EXISTS ${_rb_devlib}/${n})
        file(CREATE_LINK ${f} ${_rb_devlib}/${n} SYMBOLIC)
      endif()
    endforeach()
    if(NOT EXISTS ${_rb_devlib}/oclc_isa_version_1100.bc)
      find_program(_rb_llvm_dis NAMES llvm-dis-15 llvm-dis REQUIRED)
      find_program(_rb_llvm_as NAMES llvm-as-15 llvm-as REQUIRED)
      execute_process(COMMAND ${_rb_llvm_dis} ${_rb_bc}/oclc_isa_version_1030.bc -o ${_rb_devlib}/isa1030.ll
                      RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "llvm-dis of oclc_isa_version_1030.bc failed")
      endif()
      file(READ ${_rb_devlib}/isa1030.ll ll)
      string(REPLACE "i32 10300" "i32 11000" ll "${ll}")
      file(WRITE ${_rb_devlib}/isa1100.ll "${ll}")
      execute_process(COMMAND ${_rb_llvm_as} ${_rb_devlib}/isa1100.ll -o ${_rb_devlib}/oclc_isa_version_1100.bc
                      RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "llvm-as of the generated oclc_isa_version_1100 failed")
      endif()
    endif()
  endif()
  set(CMAKE_HIP_FLAGS "${CMAKE_HIP_FLAGS} --rocm-path=/usr --rocm-device-lib-path=${_rb_devlib}")
  enable_language(HIP)
endif()
