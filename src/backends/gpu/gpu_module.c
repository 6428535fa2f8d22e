/* The exported table of a GPU backend module (backend_module.h): built once
 * per GPU flavour, with RBEE_MODULE_CUDA into librbee-cuda.so and with
 * RBEE_MODULE_ROCM into librbee-rocm.so, beside that flavour's backend
 * (gpu_backend.cu) and its own copy of the core. Only this symbol is
 * visible outside the module. */
#include "backends/backend_module.h"

#if defined(RBEE_MODULE_CUDA)
#define MOD_KIND RB_DEVICE_CUDA
#define MOD_CREATE rb_cuda_backend_create
#define MOD_LIST rb_cuda_devices_list
#define MOD_TUNE rb_cuda_backend_tune
#define MOD_CONV_STATS rb_cuda_backend_conv_stats
#elif defined(RBEE_MODULE_ROCM)
#define MOD_KIND RB_DEVICE_ROCM
#define MOD_CREATE rb_rocm_backend_create
#define MOD_LIST rb_rocm_devices_list
#define MOD_TUNE rb_rocm_backend_tune
#define MOD_CONV_STATS rb_rocm_backend_conv_stats
#else
#error "build with RBEE_MODULE_CUDA or RBEE_MODULE_ROCM"
#endif

rb_status MOD_CREATE(int index, const rb_backend_config *cfg, rb_backend **out, rb_error *err);
rb_status MOD_LIST(rb_device_info *infos, int max, int *n, rb_error *err);

__attribute__((visibility("default"))) extern const rb_backend_module rb_backend_module_v1;
const rb_backend_module rb_backend_module_v1 = {
    .stamp = RB_BACKEND_MODULE_STAMP,
    .kind = MOD_KIND,
    .create = MOD_CREATE,
    .list = MOD_LIST,
    .tune = MOD_TUNE,
    .conv_stats = MOD_CONV_STATS,
};
