#!/bin/sh
# Golden-file test of `gpubrokerctl layout`.
# Usage: check.sh GPUBROKERCTL INPUT EXPECTED
# Runs the command on INPUT from INPUT's directory (so that messages name the
# file alone) and compares byte for byte: EXPECTED.out with the table on
# standard output, EXPECTED.err with standard error (empty when absent) and
# EXPECTED.rc with the exit status (0 when absent); EXPECTED.out.json and
# EXPECTED.csv, when they exist, with the json and csv output (same
# standard error and status). Under `meson test --setup=valgrind`,
# GPB_DAEMON_WRAPPER runs gpubrokerctl under valgrind too.
set -u
ctl=$1
input=$2
expected=$3
case $ctl in /*) ;; *) ctl=$(pwd)/$ctl ;; esac
# No trap and no cd in this shell: under the valgrind setup the shell
# itself runs under memcheck, and dash never frees what those keep.
tmp=$(mktemp -d) || exit 1
dir=$(dirname "$input")
name=$(basename "$input")
want_rc=0
[ -f "$expected.rc" ] && want_rc=$(cat "$expected.rc")
if [ -f "$expected.err" ]; then cp "$expected.err" "$tmp/want-err"; else : >"$tmp/want-err"; fi
status=0

# check FORMAT EXPECTED_STDOUT
check() {
	# The wrapper is a command line: split it.
	# shellcheck disable=SC2086
	(cd "$dir" && exec ${GPB_DAEMON_WRAPPER:-} "$ctl" --output "$1" layout "$name") \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" != "$want_rc" ]; then
		echo "FAIL: --output $1: exit status $rc, expected $want_rc"
		status=1
	fi
	diff -u "$2" "$tmp/out" || { echo "FAIL: --output $1: standard output differs"; status=1; }
	diff -u "$tmp/want-err" "$tmp/err" || { echo "FAIL: --output $1: standard error differs"; status=1; }
}

check table "$expected.out"
[ -f "$expected.out.json" ] && check json "$expected.out.json"
[ -f "$expected.csv" ] && check csv "$expected.csv"
rm -rf "$tmp"
[ $status -eq 0 ] && echo "ok: $name"
exit $status
