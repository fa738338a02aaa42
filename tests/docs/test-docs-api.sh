#!/bin/sh
# gpubroker(3) against include/gpubroker.h: every function declared in the
# header has an entry ("*type gpb_name(...);*") in the man page and every
# GPB_E_* code a row in its error table, and the page documents nothing the
# header lacks.
# Usage: test-docs-api.sh HEADER MAN_SCD
set -u
header=$1
man=$2
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

funcs=$(sed -n 's/^[a-z][a-z0-9_ ]*[ *]\(gpb_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u)
[ -n "$funcs" ] || fail "no functions found in $header"
codes=$(sed -n 's/^[[:space:]]*\(GPB_E_[A-Z0-9_]*\) *=.*/\1/p' "$header" | sort -u)
[ -n "$codes" ] || fail "no error codes found in $header"

for f in $funcs; do
	grep -q "^\*[a-z].*[ *]$f(.*);\*\$" "$man" || fail "$f is not documented in $man"
done
for c in $codes; do
	grep -q "^|  $c (" "$man" || fail "$c is not in the error table of $man"
done
# Names are single words: splitting on blanks is right.
# shellcheck disable=SC2013
for f in $(sed -n 's/^\*[a-z].*[ *]\(gpb_[a-z0-9_]*\)(.*);\*$/\1/p' "$man" | sort -u); do
	printf '%s\n' "$funcs" | grep -qx "$f" || fail "$man documents $f, which $header lacks"
done
# shellcheck disable=SC2013
for c in $(sed -n 's/^|  \(GPB_E_[A-Z0-9_]*\) (.*/\1/p' "$man" | sort -u); do
	printf '%s\n' "$codes" | grep -qx "$c" || fail "$man lists $c, which $header lacks"
done
if [ $status -ne 0 ]; then
	echo "update man/gpubroker.3.scd to match include/gpubroker.h"
	exit 1
fi
echo "$(printf '%s\n' "$funcs" | wc -l) functions and $(printf '%s\n' "$codes" | wc -l) error codes documented"
