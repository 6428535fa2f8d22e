#!/usr/bin/env bash
# `make run-sd` ends here: starts sd-worker-rbee in local mode (127.0.0.1, no
# auth) on the bundled default SD model (models/default-sd) and prints the URL,
# the web page and a ready-to-paste request that saves a picture. Ctrl-C stops
# the worker. Environment: RBEE_SD_PORT (default 7860), RBEE_BUILD (default
# build/release, where `make run-sd` builds).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${RBEE_SD_PORT:-7860}
WORKER=${RBEE_BUILD:-build/release}/apps/sd-worker-rbee/sd-worker-rbee
[[ -x "$WORKER" ]] || { echo "run-sd-worker: $WORKER not built (run make build)" >&2; exit 1; }
cat <<MSG

rbee SD worker: http://127.0.0.1:$PORT  (model: models/default-sd; open the URL for its page; Ctrl-C stops it)
Try, from another terminal (AUTOMATIC1111's API; the picture lands in out.png):

  curl -s http://127.0.0.1:$PORT/sdapi/v1/txt2img -H 'Content-Type: application/json' \\
       -d '{"prompt": "a red circle above a blue square on a yellow background", "width": 128, "height": 128, "steps": 20, "cfg_scale": 3, "seed": 5, "sampler_name": "Euler"}' \\
    | grep -o '"images":\["[^"]*' | cut -d'"' -f4 | base64 -d > out.png

MSG
exec "$WORKER" --local-mode --port "$PORT"
