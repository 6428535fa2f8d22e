#!/usr/bin/env bash
# Generates every reference data set (tokenizer ids, chat renderings, tiny
# models) on a machine that has PyTorch + transformers + tokenizers, and packs
# the result as one tarball laid out like tests/data/ (tokenizer/, chat/,
# models/). Written for the GPU machine reached through the device `run` tool,
# but works on any machine with those Python packages (everything runs on CPU).
#
# usage: tools/ref/run_on_device.sh OUT_DIR [TOKENIZER_DIR_OR_TARBALL]
#   default tokenizers: .cache/tokenizers.tar.gz if present, else .cache/tokenizers
#   writes OUT_DIR/refs.tar.gz and OUT_DIR/log.txt
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR="${1:?usage: run_on_device.sh OUT_DIR [TOKENIZERS]}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/log.txt"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES="" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

exec > >(tee -a "$LOG") 2>&1
echo "== versions"
python3 -c 'import sys, torch, transformers, tokenizers, safetensors, jinja2, numpy
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__, "safetensors", safetensors.__version__, "jinja2", jinja2.__version__,
      "numpy", numpy.__version__)' || { echo "missing python packages"; exit 1; }

TOK="${2:-}"
if [[ -z "$TOK" ]]; then
  if [[ -f "$ROOT/.cache/tokenizers.tar.gz" ]]; then TOK="$ROOT/.cache/tokenizers.tar.gz"; else TOK="$ROOT/.cache/tokenizers"; fi
fi
if [[ -f "$TOK" ]]; then
  mkdir -p "$WORK/tok" && tar -xzf "$TOK" -C "$WORK/tok" && TOK="$WORK/tok/tokenizers"
fi
echo "== tokenizers from $TOK"
(cd "$TOK" && sha256sum -c "$ROOT/tests/data/tokenizer/SHA256SUMS") || echo "WARNING: tokenizer checksums differ"

DATA="$WORK/data"
mkdir -p "$DATA/tokenizer" "$DATA/chat" "$DATA/models"
rc=0
echo "== tokenizer references"
python3 "$ROOT/tools/ref/gen_tokenizer_refs.py" "$TOK" "$ROOT/tests/data/tokenizer/corpus.json" "$DATA/tokenizer" || rc=1
echo "== chat references"
python3 "$ROOT/tools/ref/gen_chat_refs.py" "$TOK" "$DATA/chat" || rc=1
echo "== tiny models"
python3 "$ROOT/tools/ref/gen_tiny_models.py" "$DATA/models" ${RBEE_REF_MODELS:-} || rc=1
echo "== verify models"
python3 "$ROOT/tools/ref/gen_tiny_models.py" --verify "$DATA/models" || rc=1
tar -czf "$OUTDIR/refs.tar.gz" -C "$DATA" .
du -sh "$DATA"/* "$OUTDIR/refs.tar.gz"
echo "== done rc=$rc"
exit $rc
