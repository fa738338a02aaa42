#!/bin/sh
# The long runs of docs/reliability.md (issue 6): the chaos test for
# GPB_CHAOS_SECONDS (default 300 s: thousands of clients killed with SIGKILL)
# and the load test at GPB_LOAD_CONNECTIONS x GPB_LOAD_PAIRS (default 1,000
# connections x 1,000 alloc/free pairs), with the daemon SIGKILL/restart and
# SIGTERM-in-flight cases (e2e-restart) alongside. Every CI run
# (tools/test.sh) runs them scaled down: 10 s of chaos, 100 x 100 pairs.
#
# Usage: tools/reliability.sh [BUILD_DIR]   (default: build, set up if absent)
# The figures are the lines starting with '#' in the output.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${1:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build"
export GPB_CHAOS_SECONDS="${GPB_CHAOS_SECONDS:-300}"
export GPB_LOAD_CONNECTIONS="${GPB_LOAD_CONNECTIONS:-1000}"
export GPB_LOAD_PAIRS="${GPB_LOAD_PAIRS:-1000}"
echo "gpubroker reliability: chaos ${GPB_CHAOS_SECONDS} s, load" \
	"${GPB_LOAD_CONNECTIONS} x ${GPB_LOAD_PAIRS}; $(nproc) CPUs, $(uname -sr)"
# No time limit: the run lasts as long as asked.
meson test -C "$build" --timeout-multiplier 0 --verbose e2e-chaos e2e-restart e2e-load
