/* sd-worker-rbee: entry point of the Stable Diffusion worker daemon.
 * Everything lives in src/worker_sd (the worker) on src/worker (what every
 * worker shares). */
#include "worker_sd/sd_worker.h"

int main(int argc, char **argv) { return sd_worker_main(argc, argv); }
