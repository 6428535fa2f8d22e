#!/usr/bin/env bash
# Configures and builds the GPU variants of the backend on a machine without
# a GPU (CI): the CUDA backend with the installed nvcc (sm_80, sm_89, sm_90),
# the ROCm backend's HIP flavour for NVIDIA with the same nvcc (sm_90,
# RBEE_HIP_NVIDIA) and the ROCm backend with Debian's HIP (clang-15; gfx90a,
# gfx940, gfx1030, gfx1100), logging the time of each, then checks that the
# AMD code object of every target is present in the ROCm library. Needs
# `apt-get install hipcc libamdhip64-dev` (scripts/setup.sh with
# RBEE_SETUP_HIP=1) for the AMD part;
# a missing toolchain is reported and that variant skipped (exit 0) unless
# RBEE_REQUIRE_GPU_BUILDS=1. The test programs built are those with the
# ctest label gpu (what scripts/gpu-prebuilt.sh runs on the GPU machine) and
# each flavour's backend module (lib/rbee/librbee-*.so), checked to export its
# table only, while the programs link no GPU runtime.
# Usage: scripts/build-gpu.sh [build-dir-prefix]
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-build-gpu}
REQUIRE=${RBEE_REQUIRE_GPU_BUILDS:-0}
HIP_ARCHS=(gfx90a gfx940 gfx1030 gfx1100)
status=0

# the test programs labelled gpu in a configured build folder
gpu_tests() { ctest --test-dir "$1" -N -L '^gpu$' | sed -n 's/^ *Test *#[0-9]*: //p'; }

# a module exports its table and nothing else; a program links no GPU runtime
check_module() { # module-file program
  local syms
  syms=$(nm -D --defined-only "$1" | awk '$2 ~ /[TDRB]/ {print $3}' | grep -v '^_' || true)
  if [[ $syms != rb_backend_module_v1 ]]; then
    echo "build-gpu: $1 exports more than its table:"; echo "$syms" | head; exit 1
  fi
  if ldd "$2" | grep -Eq 'cudart|cublas|amdhip'; then
    echo "build-gpu: $2 links a GPU runtime (the backends are modules)"; exit 1
  fi
}

missing() {
  echo "build-gpu: $1"
  if [[ $REQUIRE == 1 ]]; then status=1; fi
}

if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=$PATH:/usr/local/cuda/bin
  start=$SECONDS
  cmake -S . -B "$PREFIX-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON >/dev/null
  ninja -C "$PREFIX-cuda" rbee_cuda_module rbee_backends $(gpu_tests "$PREFIX-cuda")
  check_module "$PREFIX-cuda/lib/rbee/librbee-cuda.so" "$PREFIX-cuda/tests/gpu/test_gpu_ops"
  echo "build-gpu: CUDA backend built in $((SECONDS - start)) s"
  # The HIP flavour built by nvcc (RBEE_HIP_NVIDIA, src/backends/gpu/hip_on_nvidia.h):
  # the ROCm backend's host path for the NVIDIA GPU (scripts/gpu-prebuilt.sh run hipnv).
  # It must compile with the HIP names of gpu_vendor.h and link no cuBLAS.
  start=$SECONDS
  cmake -S . -B "$PREFIX-hipnv" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_HIP=ON -DRBEE_HIP_NVIDIA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  ninja -C "$PREFIX-hipnv" rbee_rocm_module $(gpu_tests "$PREFIX-hipnv")
  check_module "$PREFIX-hipnv/lib/rbee/librbee-rocm.so" "$PREFIX-hipnv/tests/gpu/test_gpu_ops"
  if ldd "$PREFIX-hipnv/lib/rbee/librbee-rocm.so" | grep -q cublas; then
    echo "build-gpu: the HIP-on-NVIDIA flavour links cuBLAS"; exit 1
  fi
  echo "build-gpu: ROCm backend for NVIDIA (HIP_NVIDIA, sm_90) built in $((SECONDS - start)) s"
else
  missing "nvcc not found: CUDA variant not built"
fi

if command -v clang++-15 >/dev/null 2>&1 && [[ -d /usr/lib/x86_64-linux-gnu/cmake/hip-lang ]]; then
  start=$SECONDS
  cmake -S . -B "$PREFIX-hip" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_HIP=ON >/dev/null
  ninja -C "$PREFIX-hip" rbee_rocm_module rbee_backends $(gpu_tests "$PREFIX-hip")
  check_module "$PREFIX-hip/lib/rbee/librbee-rocm.so" "$PREFIX-hip/tests/gpu/test_gpu_ops"
  echo "build-gpu: ROCm backend built in $((SECONDS - start)) s"
  # every AMD target's code object must be in every HIP object of the library
  bundler=$(command -v clang-offload-bundler-15 || command -v clang-offload-bundler || true)
  objs=$(find "$PREFIX-hip/src/backends/gpu" -name '*_hip.hip.o')
  [[ -n $objs ]] || { echo "build-gpu: no HIP objects found"; exit 1; }
  fb=$(mktemp)
  checked=0
  for o in $objs; do
    # the device code is a clang offload bundle in the object's .hip_fatbin section
    objcopy -O binary --only-section=.hip_fatbin "$o" "$fb"
    if [[ ! -s $fb ]]; then continue; fi # host-only source (no kernels): no device code
    checked=$((checked + 1))
    if [[ -n $bundler ]]; then
      list=$($bundler --list --type=o --input="$fb")
    else
      list=$(strings -a "$fb" | grep -o 'hipv4-amdgcn-amd-amdhsa--gfx[0-9a-f]*' | sort -u)
    fi
    for a in "${HIP_ARCHS[@]}"; do
      if ! grep -q -- "amdgcn-amd-amdhsa--$a\$" <<<"$list"; then
        echo "build-gpu: code object for $a missing from $o"; echo "$list"; exit 1
      fi
    done
  done
  rm -f "$fb"
  [[ $checked -gt 0 ]] || { echo "build-gpu: no HIP object holds device code"; exit 1; }
  echo "build-gpu: AMD code objects for ${HIP_ARCHS[*]} present in all $checked HIP objects with kernels"
else
  missing "clang++-15 / hip-lang not found (apt-get install hipcc libamdhip64-dev): ROCm variant not built"
fi
exit $status
