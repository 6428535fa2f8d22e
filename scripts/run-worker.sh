#!/usr/bin/env bash
# The README's first command (`make run`) ends here: starts llm-worker-rbee in
# local mode (127.0.0.1, no auth) on the bundled default model and prints the
# URL and a ready-to-paste curl request. Ctrl-C stops the worker.
# Environment: RBEE_PORT (default 8080), RBEE_BUILD (default build/release,
# where `make run` builds).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${RBEE_PORT:-8080}
WORKER=${RBEE_BUILD:-build/release}/apps/llm-worker-rbee/llm-worker-rbee
[[ -x "$WORKER" ]] || { echo "run-worker: $WORKER not built (run make build)" >&2; exit 1; }
cat <<MSG

rbee worker: http://127.0.0.1:$PORT  (model: models/default/rbee-default-q8_0.gguf; Ctrl-C stops it)
Try, from another terminal:

  curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \\
       -d '{"prompt": "And God said", "max_tokens": 40, "temperature": 0}'

MSG
exec "$WORKER" --local-mode --port "$PORT"
