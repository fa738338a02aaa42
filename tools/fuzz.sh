#!/bin/sh
# Builds the libFuzzer harnesses of tests/fuzz (clang 14, ASan+UBSan, in
# build-fuzz) and runs them, one process at a time, on one core.
#
#   tools/fuzz.sh [HARNESS [SECONDS [libFuzzer options...]]]
#
# HARNESS: protocol, conf, pool, policy, or all (default: all, 60 s each).
# The growing corpus is build-fuzz/corpus/HARNESS (seeded from
# tests/fuzz/corpus/HARNESS); a crash leaves its input in
# build-fuzz/crashes/ and stops the run. Once the bug is fixed, add the
# input to tests/fuzz/crashes/HARNESS/: the fuzz-replay tests run it on
# every build from then on. docs/reliability.md has the long runs.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tools/deps.sh
gpb_install_deps "$GPB_PACKAGES $GPB_FUZZ_PACKAGES"

harness=${1:-all}
seconds=${2:-60}
[ $# -gt 2 ] && shift 2 || set --
if [ ! -f build-fuzz/build.ninja ]; then
	CC=clang meson setup build-fuzz -Dwerror=true -Dfuzz=true -Db_sanitize=address,undefined \
		-Db_lundef=false -Dbuildtype=debugoptimized
fi
[ "$harness" = all ] && harnesses="protocol conf pool policy" || harnesses=$harness
for h in $harnesses; do
	ninja -C build-fuzz "tests/fuzz/fuzz-$h"
done
mkdir -p build-fuzz/crashes
for h in $harnesses; do
	mkdir -p "build-fuzz/corpus/$h"
	dict=""
	[ "$h" = protocol ] && dict="-dict=tests/fuzz/protocol.dict"
	echo "gpubroker fuzz: $h for $seconds s"
	# -max_len: the seeds include 60 KiB frames (the frame cap); the
	# harness floods past the cap by itself (its FZ2_FLOOD flag), and
	# short inputs run many times faster.
	"build-fuzz/tests/fuzz/fuzz-$h" -max_total_time="$seconds" -max_len=4096 -timeout=20 \
		-print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$h-" $dict "$@" \
		"build-fuzz/corpus/$h" "tests/fuzz/corpus/$h"
done
