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
