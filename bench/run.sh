#!/bin/sh
# Runs every benchmark of issue 7 against the simulated backend and writes
# bench/results/<date>-sim.md: machine, kernel, commit, command, table.
#
#   bench/run.sh [BUILD_DIR]        (default: build; configured if missing)
#
# GPB_BENCH_OUT names another output file (several runs to compare).
#
# gpb-bench starts its own gpubrokerd (sim) and its own echo server on
# sockets in a fresh /tmp directory, so nothing else needs to be running.
# Takes about two minutes. bench/README.md says what each row measures.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in
/*) ;;
*) build=$top/$build ;;
esac
cd "$top"
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dwerror=true
fi
ninja -C "$build" bench/gpb-bench daemon/gpubrokerd >/dev/null

date=$(date -u +%Y-%m-%d)
mkdir -p bench/results
out=${GPB_BENCH_OUT:-bench/results/$date-sim.md}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT INT TERM

# Paths inside the checkout are written relative to it, as one would type them.
rel=${build#"$top"/}
cmd="GPB_DAEMON=$rel/daemon/gpubrokerd $rel/bench/gpb-bench"
echo "gpb-bench: running the full set (about two minutes)..." >&2
# Other work on the machine shows in the tails: record how busy it was.
load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
GPB_DAEMON=$rel/daemon/gpubrokerd "$rel/bench/gpb-bench" >"$tmp"
load_after=$(cut -d ' ' -f 1-3 /proc/loadavg)

# P10 (issue 31): cuMemAlloc+cuMemFree through the interposer against the
# lease path's gpb_alloc+gpb_free, the same 4 KiB, on a cuda-backend daemon:
# the fake driver's (tests/fakecuda) unless GPB_BENCH_REAL_DRIVER=1 (a GPU).
# Alternated, 5 runs of each; the medians' ratio (target at most 2).
if [ -x "$build/bench/gpb-interposebench" ] && [ -x "$build/client/intercept/gpubroker-run" ]; then
	ninja -C "$build" tests/fakecuda/libcuda.so.1 client/intercept/libgpubroker-intercept.so >/dev/null
	p10=$(mktemp -d /tmp/gpb-p10-XXXXXX)
	if [ "${GPB_BENCH_REAL_DRIVER:-0}" != 1 ]; then
		export FAKECUDA_DIR="$p10"
		export LD_LIBRARY_PATH="$build/tests/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		driver="the fake driver (tests/fakecuda)"
	else
		driver="the real driver"
	fi
	"$build/daemon/gpubrokerd" --socket "$p10/s" --backend cuda --log-level warn &
	p10pid=$!
	i=0
	while [ ! -S "$p10/s" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	export GPUBROKER_RUN_LIBRARY="$build/client/intercept/libgpubroker-intercept.so"
	lease="" via=""
	for _ in 1 2 3 4 5; do
		lease="$lease $(GPUBROKER_SOCKET=$p10/s "$build/bench/gpb-interposebench" lease 200000 | awk '{print $4}')"
		via="$via $(GPUBROKER_SOCKET=$p10/s "$build/client/intercept/gpubroker-run" -- \
			"$build/bench/gpb-interposebench" driver 200000 | awk '{print $4}')"
	done
	kill "$p10pid" && wait "$p10pid" || true
	rm -rf "$p10"
	median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | sed -n 3p; }
	ml=$(median $lease)
	mv=$(median $via)
	{
		echo
		echo "## P10: an unmodified program's cuMemAlloc+cuMemFree through the interposer"
		echo
		echo "4 KiB pairs, 200000 a run after 2000 to warm, 5 runs of each alternated, on $driver,"
		echo "\`gpb-interposebench lease|driver 200000\` (the driver one under \`gpubroker-run\`)."
		echo
		echo "| path | ns per pair (median) | runs |"
		echo "|---|---:|---|"
		echo "| gpb_alloc + gpb_free (the lease path) | $ml |$lease |"
		echo "| cuMemAlloc + cuMemFree under gpubroker-run | $mv |$via |"
		echo
		awk -v a="$mv" -v b="$ml" 'BEGIN { printf "interposer / lease path: **%.2f** (target <= 2)\n", a / b }'
	} >>"$tmp"
fi

model=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
cpus=$(nproc)
threads=$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -n 1)
hyper=$(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -n 1)
l3=$(lscpu | sed -n 's/^L3 cache: *//p' | head -n 1)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	commit="$commit (working tree has uncommitted changes)"
fi
cc=$(sed -n 's/^CC *= *//p' "$build/build.ninja" 2>/dev/null | head -n 1)
ccver=$(${cc:-cc} --version 2>/dev/null | head -n 1)
buildtype=$(meson introspect --buildoptions "$build" 2>/dev/null |
	tr '{' '\n' | sed -n 's/.*"name": "buildtype", "value": "\([a-z]*\)".*/\1/p' | head -n 1)

{
	echo "# gpubroker benchmarks, sim backend, $date"
	echo
	echo "- Machine: $model, $cpus CPUs ($threads thread(s) per core)${hyper:+, $hyper guest}, L3 $l3, $mem"
	echo "- Kernel: $(uname -sr)"
	echo "- Commit: $commit"
	echo "- Build: ${buildtype:-?}, $ccver, libuv $(pkg-config --modversion libuv), cJSON $(pkg-config --modversion libcjson)"
	echo "- Command: \`bench/run.sh\` (runs \`$cmd\`)"
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- Load average (1, 5, 15 min): $load_before before; $load_after after (the run's own 64-process phases included)"
	echo
	echo "Every ratio compares figures taken in this run; absolute times mean"
	echo "little on a shared $cpus-CPU virtual machine. See bench/README.md."
	echo
	cat "$tmp"
} >"$out"
echo "gpb-bench: wrote $out" >&2
