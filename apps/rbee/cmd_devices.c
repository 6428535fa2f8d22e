/* `rbee devices`: lists the backends compiled into this binary and the
 * devices they see, so users can tell what `--backend` values will work. */
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
        printf("usage: rbee devices\n\nLists compiled backends and their devices.\n");
        return 0;
    }
    printf("backends compiled in: %s\n", rb_backends_compiled());
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
