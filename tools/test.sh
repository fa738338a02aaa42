#!/bin/sh
# The full test suite: every suite on a normal build, then the same on an
# AddressSanitizer + UndefinedBehaviorSanitizer build, then every suite but
# the shell-script tests (suite 'scripts': memcheck would check /bin/sh)
# under valgrind (the daemons those tests start run under valgrind too: the
# cuda backend's code against the fake driver included; any error or leak
# fails). Warnings are errors in every build.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tools/deps.sh
gpb_install_deps
# Every package the tests use is installed now: a python test that skips for
# want of a module fails instead (tests/python/conftest.py).
export GPB_TEST_PACKAGES=installed

gpb_build build
meson test -C build --print-errorlogs

gpb_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C build-asan --print-errorlogs

meson test -C build --setup=valgrind --print-errorlogs
echo "gpubroker: all tests passed (normal and ASan+UBSan builds, valgrind)"
