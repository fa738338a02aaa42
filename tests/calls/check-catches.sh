#!/bin/sh
# check-calls.sh catches a call the layer table forbids.
#
#   check-catches.sh EXPECTED CHECK-CALLS TABLE MODULE=FILE...
#
# Runs CHECK-CALLS on the arguments (the build's own list plus one object
# with a forbidden call, tests/calls/*.c) and passes when it fails (exit 1)
# with the line EXPECTED, which names the caller, the function and the
# module that defines it.
set -eu
expected=$1
check=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
rc=0
"$check" "$@" >"$out" 2>&1 || rc=$?
cat "$out"
if [ "$rc" -ne 1 ]; then
	echo "check-catches: $check exited $rc, not 1, on a forbidden call" >&2
	exit 1
fi
if ! grep -qF -- "$expected" "$out"; then
	echo "check-catches: no line \"$expected\" in its report" >&2
	exit 1
fi
echo "check-catches: caught: $expected"
