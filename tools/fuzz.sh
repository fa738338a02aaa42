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
#
# GPB_FUZZ_SANITIZE=none builds without ASan+UBSan (build-fuzz-nosan):
# about twice the executions per second, for the long runs; the default
# build catches more per execution.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tools/deps.sh
gpb_install_deps "$GPB_PACKAGES $GPB_FUZZ_PACKAGES"

harness=${1:-all}
seconds=${2:-60}
[ $# -gt 2 ] && shift 2 || set --
case ${GPB_FUZZ_SANITIZE:-address,undefined} in
none) bdir=build-fuzz-nosan sanitize=none ;;
address,undefined) bdir=build-fuzz sanitize=address,undefined ;;
*) echo "tools/fuzz.sh: GPB_FUZZ_SANITIZE must be none or address,undefined" >&2; exit 2 ;;
esac
if [ ! -f "$bdir/build.ninja" ]; then
	CC=clang meson setup "$bdir" -Dwerror=true -Dfuzz=true -Db_sanitize="$sanitize" \
		-Db_lundef=false -Dbuildtype=debugoptimized
fi
[ "$harness" = all ] && harnesses="protocol conf pool policy" || harnesses=$harness
for h in $harnesses; do
	ninja -C "$bdir" "tests/fuzz/fuzz-$h"
done
mkdir -p "$bdir/crashes"
for h in $harnesses; do
	mkdir -p "$bdir/corpus/$h"
	dict=""
	[ "$h" = protocol ] && dict="-dict=tests/fuzz/protocol.dict"
	echo "gpubroker fuzz: $h for $seconds s"
	# -max_len: the seeds include 60 KiB frames (the frame cap); the
	# harness floods past the cap by itself (its FZ2_FLOOD flag), and
	# short inputs run many times faster.
	"$bdir/tests/fuzz/fuzz-$h" -max_total_time="$seconds" -max_len=4096 -timeout=20 \
		-print_final_stats=1 -artifact_prefix="$bdir/crashes/$h-" $dict "$@" \
		"$bdir/corpus/$h" "tests/fuzz/corpus/$h"
done
