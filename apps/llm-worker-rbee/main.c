/* llm-worker-rbee: entry point of the LLM worker daemon. Everything lives in
 * src/worker_llm (the worker) on src/worker (what every worker shares). */
#include "worker_llm/llm_worker.h"

int main(int argc, char **argv) { return llm_worker_main(argc, argv); }
