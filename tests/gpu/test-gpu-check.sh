#!/bin/sh
# cuda-fake-gpu-check: the GPU check, end to end, against the fake driver,
# so that the bundle, tools/gpu-check.sh and its results file are known to
# work before a GPU sees them (issue 25).
#
#   test-gpu-check.sh SOURCE_ROOT BUILD_ROOT
#
# Bundles BUILD_ROOT with tools/gpu-bundle.sh (no wheels: CI has no network
# to count on) into a temporary folder, runs tools/gpu-check.sh --dry from
# it, and checks:
# - the bundle: libgpubroker.so.0 a real file, no symbolic links, and every
#   ELF file's libraries found with the bundle's lib/ alone added;
# - the results file: it says it is the fake, lists every check of
#   `gpu-check.sh --list` once with a verdict, none FAIL, TIMEOUT or NOTRUN
#   (on the fake every program passes or skips: a failure here is the
#   script's or the bundle's), the summary counts them all, both bench-gpu
#   tables and the probe's section are there;
# - the logs tarball holds every check's log.
set -u
src=$1 build=$2

fail() {
	echo "FAIL: $*"
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpb-gpu-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The python that runs the Python tests: one with pytest (Debian's
# pytest-3 runs /usr/bin/python3, which may not be the first python3).
python=
for p in /usr/bin/python3 python3; do
	if "$p" -c 'import pytest' >/dev/null 2>&1; then
		python=$p
		break
	fi
done
[ -n "$python" ] || {
	echo "no python3 with pytest: skipped"
	exit 77
}

bash "$src/tools/gpu-bundle.sh" --no-wheels "$build" "$tmp/bundle" || fail "gpu-bundle.sh failed"
b=$tmp/bundle
if [ ! -f "$b/lib/libgpubroker.so.0" ] || [ -L "$b/lib/libgpubroker.so.0" ]; then
	fail "the bundle has no libgpubroker.so.0 as a file"
fi
links=$(find "$b" -type l | head -n 3)
[ -z "$links" ] || fail "the bundle holds symbolic links (they may not travel): $links"
missing=$(find "$b/build" "$b/lib" -type f -perm -u+x -o -type f -name '*.so*' | while read -r f; do
	head -c 4 "$f" | grep -q ELF || continue
	LD_LIBRARY_PATH=$b/lib ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|${f#"$b"/}: |"
done | grep -v 'libcuda\.so' | head -n 5)
[ -z "$missing" ] || fail "bundled programs miss libraries: $missing"
echo "bundle: $(du -sh "$b" | cut -f1), no links, every library found"

GPB_CHECK_PYTHON=$python bash "$src/tools/gpu-check.sh" --dry --bundle "$b" --out "$tmp/out" \
	--no-repo-results --deadline 500 >"$tmp/check.log" 2>&1
rc=$?
tail -n 3 "$tmp/check.log"
set -- "$tmp"/out/*-gpu-check-dry.md
[ -f "$1" ] || { cat "$tmp/check.log"; fail "no results file in $tmp/out"; }
res=$1

grep -q '^\*\*This is the fake\.\*\*' "$res" || fail "the results file does not say it is the fake"
n=0
for name in $(bash "$src/tools/gpu-check.sh" --list); do
	n=$((n + 1))
	rows=$(grep -c "^| $name | " "$res")
	[ "$rows" = 1 ] || fail "check $name: $rows rows in the results file, expected 1"
	v=$(grep "^| $name | " "$res" | cut -d '|' -f 3 | tr -d ' ')
	case $v in
	PASS | SKIP) ;;
	*) fail "check $name is $v on the fake: $(grep "^| $name | " "$res")" ;;
	esac
	tar -tzf "$tmp"/out/*-gpu-check-dry-logs.tar.gz | grep -qx "logs/$name.log" ||
		fail "no log of $name in the tarball"
done
[ "$n" -gt 100 ] || fail "gpu-check.sh --list names $n checks, expected over 100"
grep -q "^$n checks: " "$res" || fail "the summary does not count $n checks: $(grep ' checks: ' "$res")"
for tr in vmm ipc; do
	sed -n "/^## bench-gpu, transport $tr\$/,/^## /p" "$res" | grep -q '^| size | cycles | broker us' ||
		fail "no bench-gpu table for transport $tr"
done
grep -q "^## The driver's answers (tests/gpu/probe.py)" "$res" || fail "no probe section"
grep -q '^- CUDA version (driver API): ' "$res" || fail "no CUDA version"
[ "$rc" = 0 ] || fail "gpu-check.sh exited $rc"
echo "ok: $n checks listed with their verdicts, both bench-gpu tables, the probe, the logs"
