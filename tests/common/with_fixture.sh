#!/usr/bin/env bash
# Runs a test command that needs a fixture folder, with tu_fixture's rule
# for scripts and node tests (tests/common/tu_fixture.c): when the folder is
# absent, "skipped: fixture missing: <path>" and exit 77 (set the test's
# SKIP_RETURN_CODE 77), or, under CI (CI=true or 1), a failure.
# usage: with_fixture.sh FIXTURE_PATH [FIXTURE_PATH...] -- COMMAND [ARGS...]
set -u
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    if [ ! -e "$1" ]; then
        case ${CI:-} in
        true | 1) echo "fixture missing: $1 (CI=true: every fixture is required)"; exit 1 ;;
        *) echo "skipped: fixture missing: $1"; exit 77 ;;
        esac
    fi
    shift
done
[ $# -gt 1 ] || { echo "usage: with_fixture.sh FIXTURE... -- COMMAND [ARGS...]" >&2; exit 2; }
shift
exec "$@"
