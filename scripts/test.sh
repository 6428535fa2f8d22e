#!/usr/bin/env bash
# The whole test suite, as the README's test command and CI run it:
# install dependencies (HIP toolchain included), then build and test with gcc
# (-Werror), build and test the ASan+UBSan build with clang (-Werror, so clang
# cleanliness is checked there), a short libFuzzer smoke run of the
# file-format parsers, tokenizer.json, chat templates and the worker's
# request path, and the CUDA and HIP builds of the GPU backend (compile
# only: CI has no GPU; the GPU tests run on the lent GPU machine through
# scripts/gpu-prebuilt.sh). Each stage's wall time is logged.
# Outside CI, what a clone elsewhere may lack is reported, not failed: tests
# whose reference fixtures (../shared/fixtures) are absent are skipped
# ("skipped: fixture missing: <path>", listed after each ctest run), and a
# GPU build whose toolchain (nvcc, HIP) is absent is skipped. Under CI
# (CI=true, as .ci/run starts it) all of it is required, as are the
# fixtures.
# Environment: CI, RBEE_JOBS (parallel jobs, default nproc), RBEE_FUZZ_SECONDS
# (per fuzz target, default 12: 17 targets; longer runs by hand), RBEE_SKIP_STAGES (space-separated names).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${RBEE_JOBS:-$(nproc)}
FUZZ_SECONDS=${RBEE_FUZZ_SECONDS:-12}
SKIP=" ${RBEE_SKIP_STAGES:-} "
declare -a SUMMARY=()

stage() { # stage NAME command...
  local name=$1; shift
  if [[ "$SKIP" == *" $name "* ]]; then echo "=== $name: skipped"; SUMMARY+=("$name skipped"); return; fi
  echo "=== $name"
  local t0=$SECONDS
  "$@"
  local dt=$((SECONDS - t0))
  echo "=== $name: ${dt}s"
  SUMMARY+=("$name ${dt}s")
}

configure_build() { # dir cc extra-cmake-args...
  local dir=$1 cc=$2; shift 2
  CC=$cc cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

# ctest, then what each skipped test said it lacks
run_ctest() { # dir [ctest args]
  local dir=$1 rc=0
  shift
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure "$@" || rc=$?
  local log=$dir/Testing/Temporary/LastTest.log
  if [[ -f $log ]]; then
    awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3 } /^skipped: / { print "skipped: " name ": " substr($0, 10) }' \
      "$log" | sort -u
  fi
  return $rc
}

sanitize_ctest() { ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build/asan; }

case ${CI:-} in true | 1) REQUIRE_GPU=1 ;; *) REQUIRE_GPU=0 ;; esac

stage setup env RBEE_SETUP_HIP=1 scripts/setup.sh test
stage gcc-build configure_build build/gcc gcc -DRBEE_TESTS=ON
stage gcc-test run_ctest build/gcc
stage sanitize-build configure_build build/asan clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRBEE_SANITIZE=ON -DRBEE_TESTS=ON
stage sanitize-test sanitize_ctest
stage fuzz-build configure_build build/fuzz clang -DRBEE_FUZZ=ON -DRBEE_TESTS=OFF
stage fuzz-smoke tests/fuzz/run-smoke.sh build/fuzz "$FUZZ_SECONDS"
stage gpu-build env RBEE_REQUIRE_GPU_BUILDS=$REQUIRE_GPU scripts/build-gpu.sh build/gpu

echo "=== stage times: ${SUMMARY[*]}"
