#!/bin/sh
# Instructions per alloc+free pair, in the client and in the daemon, under
# valgrind's callgrind (exact and repeatable, where timings on these shared
# guests are not): bench/cg-pairs.c runs N pairs against a daemon, both
# under callgrind, once with N = 0 and once with N = PAIRS; the difference
# divided by PAIRS is the cost of one pair (start-up and hello cancel out).
#
#   bench/callgrind.sh [BUILD_DIR [SOURCE_DIR]] [PAIRS]
#
# BUILD_DIR (default build) is a configured build of SOURCE_DIR (default
# this checkout): another tree (a commit before a change) is measured by
# the same client program. Prints "client N daemon M" instructions per pair.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
src=${2:-$top}
pairs=${3:-2000}
ninja -C "$build" daemon/gpubrokerd client/libgpubroker.so.0.1.0 >/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT INT TERM
cc -O2 -I"$src/include" -o "$dir/cg-pairs" "$top/bench/cg-pairs.c" \
	-L"$build/client" -lgpubroker -Wl,-rpath,"$build/client"

# Total Ir of a callgrind output file.
total() {
	sed -n 's/^summary: *\([0-9]*\).*/\1/p;s/^totals: *\([0-9]*\).*/\1/p' "$1" | head -n 1
}

run() { # $1: pairs; prints "client daemon" totals
	sock=$dir/sock
	valgrind --tool=callgrind --callgrind-out-file="$dir/d.$1" \
		"$build/daemon/gpubrokerd" --socket "$sock" --backend sim \
		--sim-memory 64GiB --log-level error 2>/dev/null &
	dpid=$!
	i=0
	while [ ! -S "$sock" ] && [ $i -lt 600 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	GPUBROKER_SOCKET=$sock valgrind --tool=callgrind \
		--callgrind-out-file="$dir/c.$1" "$dir/cg-pairs" "$1" 2>/dev/null
	kill -TERM $dpid
	wait $dpid || true
	echo "$(total "$dir/c.$1") $(total "$dir/d.$1")"
}

set -- $(run 0) $(run "$pairs")
echo "client $((($3 - $1) / pairs)) daemon $((($4 - $2) / pairs))"
