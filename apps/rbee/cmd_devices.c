/* `rbee devices`: lists the backends (the CPU built in, each GPU kind's
 * module: where it was loaded from, or why it cannot be) and the devices
 * they see, so users can tell what `--backend` values will work. */
#include "commands.h"
#include "rbee/backend.h"

#include <stdio.h>
#include <string.h>

static const char *kind_name(rb_device_kind k) {
    switch (k) {
    case RB_DEVICE_CPU: return "cpu";
    case RB_DEVICE_CUDA: return "cuda";
    case RB_DEVICE_ROCM: return "rocm";
    }
    return "?";
}

int rb_cmd_devices(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: rbee devices\n\nLists the backends (GPU ones are modules loaded at run time) and their "
               "devices.\n");
        return 0;
    }
    printf("backends built: %s\n", rb_backends_compiled());
    const rb_device_kind kinds[] = {RB_DEVICE_CPU, RB_DEVICE_CUDA, RB_DEVICE_ROCM};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char path[4096];
        rb_error perr;
        rb_error_clear(&perr);
        if (rb_backend_module_probe(kinds[i], path, sizeof path, &perr) == RB_OK)
            printf("  %-5s %s\n", kind_name(kinds[i]), path);
        else
            printf("  %-5s unavailable: %s\n", kind_name(kinds[i]), perr.msg);
    }
    rb_device_info infos[16];
    int n = 0;
    rb_error err;
    rb_error_clear(&err);
    if (rb_devices_list(infos, 16, &n, &err) != RB_OK) {
        fprintf(stderr, "rbee devices: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < n && i < 16; i++) {
        const rb_device_info *d = &infos[i];
        printf("%s:%d  %s  [%s]  memory %.1f GiB total, %.1f GiB free, %d compute units\n", kind_name(d->kind),
               d->index, d->name, d->features, (double)d->mem_total / (1u << 30), (double)d->mem_free / (1u << 30),
               d->compute_units);
    }
    return 0;
}
