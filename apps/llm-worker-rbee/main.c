/* llm-worker-rbee: entry point of the worker daemon. Parses the command line
 * (the binary's name may preselect a backend) and runs the worker until
 * SIGTERM/SIGINT. Everything else lives in src/server. */
#include "server/srv_config.h"
#include "server/srv_log.h"
#include "server/srv_worker.h"

int main(int argc, char **argv) {
    srv_config cfg;
    srv_config_defaults(&cfg);
    int r = srv_config_parse(&cfg, argc, argv);
    if (r == 1) return 0;
    if (r != 0) return 2;
    cfg.log_json = srv_log_format_from_env();
    return srv_worker_main(&cfg);
}
