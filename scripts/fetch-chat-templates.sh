#!/usr/bin/env bash
# Fetches the official chat templates of the model families whose
# tokenizer_config.json with a template is not on npm (Qwen 2.5, Gemma 2,
# Phi-3.5, Mistral Nemo, gpt-oss, Mixtral) so the chat-template tests can
# render them. Most ship in llama.cpp's models/templates/ folder, which the
# npm package node-llama-cpp carries as a git bundle (the npm registry is the
# one network source CI has); Mixtral-8x7B-Instruct's is not there, and comes
# from @huggingface/ollama-utils, whose chat-template map records the template
# of each Ollama library model's GGUF (the "gguf" field of the
# library/mixtral:8x7b entry, which llama.cpp's converter copied from the
# model's tokenizer_config.json). Each template is checked against
# tests/data/chat/TEMPLATE_SHA256SUMS and written as
# DEST/<family>/tokenizer_config.json with that family's bos/eos tokens, the
# same shape as the npm tokenizer folders. Idempotent and offline-safe once
# complete.
#
# usage: scripts/fetch-chat-templates.sh [DEST]   (default build/cache/tokenizers)
#        RBEE_TEMPLATES_UPDATE_SUMS=1 ...          rewrite the checksums instead of checking
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/build/cache/tokenizers}"
PKG="node-llama-cpp@3.22.1"
OLLAMA_PKG="@huggingface/ollama-utils@0.0.18"
SUMS="$ROOT/tests/data/chat/TEMPLATE_SHA256SUMS"
# family source bos_token eos_token (- = none), separated by spaces (the
# tokens hold '|'); source: a file under llama.cpp's models/templates, or
# ollama:<model> for the ollama-utils map
FAMILIES=(
  "qwen2_5 Qwen-Qwen2.5-7B-Instruct.jinja - <|im_end|>"
  "gemma2 google-gemma-2-2b-it.jinja <bos> <eos>"
  "phi3_5 microsoft-Phi-3.5-mini-instruct.jinja <s> <|endoftext|>"
  "mistral_nemo mistralai-Mistral-Nemo-Instruct-2407.jinja <s> </s>"
  "gpt_oss openai-gpt-oss-120b.jinja <|startoftext|> <|return|>"
  "mixtral ollama:library/mixtral:8x7b <s> </s>"
)

die() { echo "fetch-chat-templates: $*" >&2; exit 1; }

mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"

missing=0
for f in "${FAMILIES[@]}"; do
  IFS=' ' read -r name _ <<<"$f"
  [[ -s "$DEST/$name/tokenizer_config.json" && -s "$DEST/$name/chat_template.jinja" ]] || missing=1
done

if [[ $missing == 1 ]]; then
  command -v npm >/dev/null 2>&1 || die "npm not found and templates are missing"
  command -v git >/dev/null 2>&1 || die "git not found"
  command -v python3 >/dev/null 2>&1 || die "python3 not found"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-chat-templates: npm pack $PKG"
  (cd "$tmp" && npm pack --silent "$PKG" >/dev/null 2>"$tmp/npm.log") || { cat "$tmp/npm.log" >&2; die "npm pack $PKG failed"; }
  tgz="$(ls "$tmp"/*.tgz 2>/dev/null | head -n1)"
  [[ -n "$tgz" ]] || die "npm pack produced no tarball"
  tar -xzf "$tgz" -C "$tmp" package/llama/gitRelease.bundle || die "$PKG has no llama/gitRelease.bundle"
  git clone --quiet --no-checkout "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp" 2>"$tmp/git.log" ||
    { cat "$tmp/git.log" >&2; die "cannot read the llama.cpp bundle"; }
  echo "fetch-chat-templates: npm pack $OLLAMA_PKG"
  mkdir -p "$tmp/ollama"
  (cd "$tmp/ollama" && npm pack --silent "$OLLAMA_PKG" >/dev/null 2>"$tmp/npm2.log") ||
    { cat "$tmp/npm2.log" >&2; die "npm pack $OLLAMA_PKG failed"; }
  tar -xzf "$tmp"/ollama/*.tgz -C "$tmp/ollama" package/src/chat-template-automap.ts ||
    die "$OLLAMA_PKG has no src/chat-template-automap.ts"
  for f in "${FAMILIES[@]}"; do
    IFS=' ' read -r name file bos eos <<<"$f"
    mkdir -p "$DEST/$name"
    if [[ "$file" == ollama:* ]]; then
      # the JavaScript string literal after `gguf: ` in that model's entry (its escapes are JSON's)
      python3 - "$tmp/ollama/package/src/chat-template-automap.ts" "${file#ollama:}" \
        >"$DEST/$name/chat_template.jinja.part" <<'PY' || die "no template for ${file#ollama:} in $OLLAMA_PKG"
import json, sys
src, model = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
i = src.index('model: "%s",' % model)
j = src.index('gguf: "', i) + len("gguf: ")
k = j + 1
while src[k] != '"':
    k += 2 if src[k] == "\\" else 1
sys.stdout.write(json.loads(src[j:k + 1]))
PY
    else
      git -C "$tmp/llama.cpp" show "HEAD:models/templates/$file" >"$DEST/$name/chat_template.jinja.part" ||
        die "models/templates/$file is not in the bundle"
    fi
    mv "$DEST/$name/chat_template.jinja.part" "$DEST/$name/chat_template.jinja"
  done
fi

if [[ "${RBEE_TEMPLATES_UPDATE_SUMS:-0}" == 1 ]]; then
  (cd "$DEST" && for f in "${FAMILIES[@]}"; do IFS=' ' read -r name _ <<<"$f"; sha256sum "$name/chat_template.jinja"; done) >"$SUMS"
  echo "fetch-chat-templates: wrote $SUMS"
else
  [[ -f "$SUMS" ]] || die "$SUMS missing"
  (cd "$DEST" && sha256sum --quiet -c "$SUMS") || die "checksum mismatch against $SUMS"
fi

# tokenizer_config.json: the template plus the family's special tokens
for f in "${FAMILIES[@]}"; do
  IFS=' ' read -r name file bos eos <<<"$f"
  python3 - "$DEST/$name" "$bos" "$eos" "$file" <<'EOF'
import json, sys
d, bos, eos, file = sys.argv[1:]
if file.startswith("ollama:"):
    src = "@huggingface/ollama-utils@0.0.18 src/chat-template-automap.ts, " + file[len("ollama:"):] + " (gguf)"
else:
    src = "node-llama-cpp@3.22.1 llama/gitRelease.bundle models/templates/" + file
cfg = {"chat_template": open(d + "/chat_template.jinja", encoding="utf-8").read(), "rbee_source": src}
if bos != "-": cfg["bos_token"] = bos
if eos != "-": cfg["eos_token"] = eos
with open(d + "/tokenizer_config.json.part", "w", encoding="utf-8") as f:
    json.dump(cfg, f, ensure_ascii=False, indent=1)
EOF
  mv "$DEST/$name/tokenizer_config.json.part" "$DEST/$name/tokenizer_config.json"
  echo "fetch-chat-templates: $DEST/$name"
done
