#!/usr/bin/env bash
# Trains rbee-c's default Stable Diffusion model end to end on one CUDA GPU, checks it in diffusers, packs it.
#
# Why: one command makes the published files of models/default-sd/ again, with their log, from a seed.
# On the GPU machine (python3 with torch; diffusers from ../shared/tools/diffusers-src.tar.xz unpacked where
# DIFFUSERS_SRC points, for the diffusers check):
#   OUT=/some/dir DIFFUSERS_SRC=/tmp/dfs/diffusers-src/src bash tools/train-default-sd/train.sh [train.py options]
# Results: $OUT/default-sd.tar.gz (the diffusers folder, samples, summary, train_log.txt).
# Then, on a machine with rbee built: python3 tools/train-default-sd/check_rbee.py MODEL_DIR build/.../rbee
# QUICK=1 makes a few-step smoke run of the whole pipeline (not the published model).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../../.cache/train-sd}
mkdir -p "$out" || exit 1
extra=()
[ "${QUICK:-0}" = 1 ] && extra=(--quick)
{
    echo "== rbee-c default SD model: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
    python3 "$here/train.py" --out "$out" "${extra[@]}" "$@" || exit 1
    if [ -n "${DIFFUSERS_SRC:-}" ]; then
        echo "== diffusers check"
        PYTHONPATH="$DIFFUSERS_SRC" python3 "$here/diffusers_check.py" "$out/model" || exit 1
    else
        echo "== diffusers check skipped (DIFFUSERS_SRC not set)"
    fi
    (cd "$out/model" && find . -type f | sort | xargs sha256sum)
} 2>&1 | tee -a "$out/run_log.txt"
status=${PIPESTATUS[0]}
(cd "$out" && tar czf default-sd.tar.gz model samples-*.png summary.json train_log.txt run_log.txt) || exit 1
exit "$status"
