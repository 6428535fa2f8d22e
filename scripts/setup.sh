#!/usr/bin/env bash
# Installs the Debian packages rbee needs. Idempotent: packages already
# present are skipped, and apt is only touched when something is missing.
# Run as root or with sudo available.
#   scripts/setup.sh run    what building and running needs (`make run`,
#                           `make install`): compiler, CMake, the libraries
#                           the programs link, help2man for the man pages,
#                           curl for the request `make run` suggests
#   scripts/setup.sh test   that plus the test toolchain (`make test`):
#                           cmocka, clang and its sanitizer runtimes, node
#                           and npm, python3, chromium, openssl, man-db and
#                           systemd (the install test renders the man pages
#                           and verifies the example unit)
# Environment: RBEE_SETUP_HIP=1 adds the ROCm/HIP toolchain (the GPU builds).
set -euo pipefail

what=${1:-test}
RUN_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libjansson-dev libpcre2-dev libmicrohttpd-dev libcurl4-openssl-dev
  zlib1g-dev libpng-dev libjpeg62-turbo-dev
  help2man curl
)
TEST_PACKAGES=(
  clang libclang-rt-14-dev llvm
  libcmocka-dev
  nodejs python3 jq openssl
  chromium man-db systemd
)
case $what in
  run) PACKAGES=("${RUN_PACKAGES[@]}") ;;
  test) PACKAGES=("${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
    # npm: the machine image may ship its own npm; Debian's is only needed when none is present.
    if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi ;;
  *) echo "usage: scripts/setup.sh run|test" >&2; exit 2 ;;
esac
# GPU toolchains are optional extras for the CUDA/HIP builds.
if [[ "${RBEE_SETUP_HIP:-0}" == 1 ]]; then PACKAGES+=(hipcc libamdhip64-dev); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup ($what): all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup ($what): installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
