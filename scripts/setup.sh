#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent:
# packages already present are skipped, and apt is only touched when
# something is missing. Run as root or with sudo available.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-14-dev llvm
  libcmocka-dev libjansson-dev libpcre2-dev libmicrohttpd-dev libcurl4-openssl-dev
  zlib1g-dev libpng-dev libjpeg62-turbo-dev
  nodejs python3 curl jq openssl
  chromium
)
# npm: the machine image may ship its own npm; Debian's is only needed when none is present.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi
# GPU toolchains are optional extras for the CUDA/HIP builds.
if [[ "${RBEE_SETUP_HIP:-0}" == 1 ]]; then PACKAGES+=(hipcc libamdhip64-dev); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
