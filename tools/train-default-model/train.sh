#!/usr/bin/env bash
# Reproduces rbee-c's bundled default model end to end on one CUDA GPU machine.
#
# Why: one command trains the tokenizer, trains and selects the model, evaluates it and packs the
# results, so the published files in models/default/ can be regenerated exactly as they were made.
#
# Before (on any Debian machine, no GPU needed):
#   apt-get install bible-kjv && python3 tools/train-default-model/prepare_corpus.py
# Then, on the GPU machine (python3 with torch, transformers, tokenizers, safetensors):
#   bash tools/train-default-model/train.sh
# Results: $OUT/default-model.tar.gz.part-* (cat them, then tar xzf into models/default/) and
# $OUT/train_log.txt. OUT defaults to .cache/train/out. QUICK=1 makes a tiny smoke-test run.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=${DATA:-$root/.cache/train}
out=${OUT:-$root/.cache/train/out}
work=${WORK:-$(mktemp -d /tmp/rbee-default-model.XXXXXX)}
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=true
extra=()
if [ "${QUICK:-0}" = 1 ]; then
    extra=(--epoch-scale 0.02 --eval-every 8 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128)
fi

for f in train.txt valid.txt test.txt corpus.json; do
    [ -f "$data/$f" ] || { echo "missing $data/$f: run prepare_corpus.py first" >&2; exit 1; }
done
mkdir -p "$out" "$work/hf" || exit 1

run_all() {
    echo "== rbee-c default model: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
    python3 -c 'import sys, torch, transformers, tokenizers, safetensors; print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__, "| tokenizers", tokenizers.__version__, "| safetensors", safetensors.__version__)' || return 1
    echo "== corpus (prepare_corpus.py)"
    cat "$data/corpus.json" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["source"]); print("bible-kjv-text", m["bible-kjv-text_version"]); print(m["split_rule"]); [print(" ", s, v) for s, v in m["splits"].items()]' || return 1
    echo "== tokenizer"
    local t0=$SECONDS
    python3 "$here/train_tokenizer.py" --train "$data/train.txt" \
        --check "$data/valid.txt" "$data/test.txt" --out-dir "$work/hf" || return 1
    echo "tokenizer time: $((SECONDS - t0))s"
    echo "== model"
    t0=$SECONDS
    python3 "$here/train_model.py" --data-dir "$data" --tokenizer-dir "$work/hf" \
        --out-dir "$work/hf" --summary "$work/train_summary.json" "${extra[@]}" || return 1
    echo "model time: $((SECONDS - t0))s"
    echo "== evaluation"
    t0=$SECONDS
    python3 "$here/evaluate.py" --hf-dir "$work/hf" --data-dir "$data" \
        --heldout "$root/models/default/heldout.txt" --out-dir "$work" || return 1
    echo "evaluation time: $((SECONDS - t0))s"
    echo "== files"
    ls -l "$work/hf" "$work"
    for f in config.json generation_config.json tokenizer_config.json; do
        echo "-- $f"; cat "$work/hf/$f"; echo
    done
    (cd "$work/hf" && sha256sum ./*)
}

start=$SECONDS
run_all 2>&1 | tee "$work/train_log.txt"
rc=${PIPESTATUS[0]}
echo "== total $((SECONDS - start))s, exit $rc" | tee -a "$work/train_log.txt"

# Pack whatever exists, also after a failure; parts stay under 15 MiB each.
files=()
for f in hf train_log.txt train_summary.json reference.json reference_logits.f32; do
    [ -e "$work/$f" ] && files+=("$f")
done
rm -f "$out"/default-model.tar.gz.part-*
tar -C "$work" -czf - "${files[@]}" | split -b 15m - "$out/default-model.tar.gz.part-"
cp "$work/train_log.txt" "$out/train_log.txt"
ls -l "$out"
exit "$rc"
