#!/usr/bin/env bash
# tu_fixture's rule (tests/common/tu_fixture.c), on tu_fixture_probe: with
# the fixture present both cases pass (exit 0); without it and CI unset the
# fixture case is skipped with the path named, the other case still runs,
# and the program exits 77 (ctest: skipped); with CI=true a missing fixture
# fails (exit 1); a failing case is a failure (1), never a skip, even when
# a fixture is missing too. A fixture missing in a group setup skips the
# whole program (77) or fails it under CI; with_fixture.sh, the wrapper of
# script and node tests, follows the same rule and otherwise passes the
# command's own exit status through. "fail" = any status but 0 and 77 (a
# sanitizer build aborts a failing run with 134: what a failed case
# allocated is leaked).
# usage: test_fixture_skip.sh PROBE_BINARY
set -u
PROBE=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/full/tu_fixture_probe" "$TMP/empty"
printf 'probe\n' >"$TMP/full/tu_fixture_probe/present.txt"
fails=0
status_ok() { # STATUS WANT
    if [ "$2" = fail ]; then [ "$1" != 0 ] && [ "$1" != 77 ]; else [ "$1" = "$2" ]; fi
}
# expect NAME WANT_RC PATTERN... -- ENV... : runs the probe with ENV, checks its exit status and output
expect() {
    local name=$1 want=$2; shift 2
    local pats=()
    while [ "$1" != "--" ]; do pats+=("$1"); shift; done
    shift
    local out rc
    out=$(env -u CI -u TU_PROBE_FAIL -u TU_PROBE_GROUP "$@" "$PROBE" 2>&1)
    rc=$?
    if ! status_ok "$rc" "$want"; then echo "FAIL: $name: exit $rc, want $want"; echo "$out"; fails=$((fails + 1)); return; fi
    for p in "${pats[@]}"; do
        if ! grep -qF -- "$p" <<<"$out"; then echo "FAIL: $name: no '$p' in:"; echo "$out"; fails=$((fails + 1)); return; fi
    done
    echo "ok: $name"
}
expect present 0 "[       OK ] test_needs_fixture" "[       OK ] test_plain" -- RBEE_FIXTURES_DIR="$TMP/full"
expect missing 77 "skipped: fixture missing: $TMP/empty/tu_fixture_probe/present.txt" "[       OK ] test_plain" \
    -- RBEE_FIXTURES_DIR="$TMP/empty"
expect missing-under-ci fail "fixture missing: $TMP/empty/tu_fixture_probe/present.txt (CI=true" "[  FAILED  ]" \
    -- RBEE_FIXTURES_DIR="$TMP/empty" CI=true
expect missing-ci-1 fail "[  FAILED  ]" -- RBEE_FIXTURES_DIR="$TMP/empty" CI=1
expect ci-false-skips 77 "skipped: fixture missing" -- RBEE_FIXTURES_DIR="$TMP/empty" CI=false
expect failure-with-skip fail "skipped: fixture missing" "[  FAILED  ] test_plain" \
    -- RBEE_FIXTURES_DIR="$TMP/empty" TU_PROBE_FAIL=1
expect failure-alone fail "[  FAILED  ] test_plain" -- RBEE_FIXTURES_DIR="$TMP/full" TU_PROBE_FAIL=1
expect group-present 0 "[  PASSED  ] 2 test(s)." -- RBEE_FIXTURES_DIR="$TMP/full" TU_PROBE_GROUP=1
expect group-missing 77 "skipped: fixture missing: $TMP/empty/tu_fixture_probe" \
    -- RBEE_FIXTURES_DIR="$TMP/empty" TU_PROBE_GROUP=1
expect group-missing-under-ci fail "fixture missing: $TMP/empty/tu_fixture_probe (CI=true" \
    -- RBEE_FIXTURES_DIR="$TMP/empty" TU_PROBE_GROUP=1 CI=true
# with_fixture.sh: the probe (or false) behind the wrapper
W="bash $(dirname "$0")/with_fixture.sh"
expect wrap-present 0 "[  PASSED  ] 2 test(s)." -- RBEE_FIXTURES_DIR="$TMP/full" $W "$TMP/full/tu_fixture_probe" --
expect wrap-status fail "[  FAILED  ] test_plain" -- RBEE_FIXTURES_DIR="$TMP/full" TU_PROBE_FAIL=1 \
    $W "$TMP/full/tu_fixture_probe" --
expect wrap-missing 77 "skipped: fixture missing: $TMP/empty/x" -- $W "$TMP/full" "$TMP/empty/x" --
expect wrap-missing-under-ci fail "fixture missing: $TMP/empty/x (CI=true" -- CI=true $W "$TMP/empty/x" --
[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
