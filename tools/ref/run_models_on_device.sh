#!/usr/bin/env bash
# Generates only tiny reference models (no tokenizer or chat references, so
# no tokenizer files are needed) on a machine with PyTorch + transformers,
# verifies them by reloading, and packs them as one tarball laid out like
# tests/data/models/. Written for the GPU machine reached through the device
# `run` tool (everything runs on its CPU).
#
# usage: tools/ref/run_models_on_device.sh OUT_DIR [NAME...]
#   NAME...: models of gen_tiny_models.py (--list); none: every model
#   writes OUT_DIR/models.tar.gz (NAME/ folders) and OUT_DIR/log.txt
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR="${1:?usage: run_models_on_device.sh OUT_DIR [NAME...]}"
shift
mkdir -p "$OUTDIR"
LOG="$OUTDIR/log.txt"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES="" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
exec > >(tee -a "$LOG") 2>&1
python3 -c 'import sys, torch, transformers, safetensors, numpy
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "safetensors", safetensors.__version__, "numpy", numpy.__version__)' || { echo "missing python packages"; exit 1; }
rc=0
python3 "$ROOT/tools/ref/gen_tiny_models.py" "$WORK/models" "$@" || rc=1
python3 "$ROOT/tools/ref/gen_tiny_models.py" --verify "$WORK/models" || rc=1
tar -czf "$OUTDIR/models.tar.gz" -C "$WORK/models" .
du -sh "$WORK/models"/* "$OUTDIR/models.tar.gz"
echo "== done rc=$rc"
exit $rc
