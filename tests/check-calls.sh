#!/bin/sh
# No call goes up a layer: the link-level twin of check-layers.sh.
#
#   tests/check-calls.sh NAME=LIB.a [NAME=LIB.a ...]
#
# The static libraries of the modules, bottom layer first. A function that
# one module calls (an undefined symbol of its library) and another module
# of the list defines must be defined by a module earlier in the list: a
# call into a later one is a call up a layer, which ties the two modules
# into one cycle even when no header says so (a prototype written by hand,
# a callback called by name). Exits 0, or 1 naming every such call.
set -eu
[ $# -gt 0 ] || {
	echo "usage: $0 NAME=LIB.a..." >&2
	exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

rank=0
for arg in "$@"; do
	name=${arg%%=*}
	lib=${arg#*=}
	rank=$((rank + 1))
	# nm to a file first: in a pipeline its failure would go unseen.
	nm -g --defined-only "$lib" >"$tmp/nm-defs"
	nm -u "$lib" >"$tmp/nm-uses"
	# A library that defines nothing is a wrong path or an empty build: it
	# would make every check vacuous.
	if ! awk 'NF == 3 { found = 1 } END { exit !found }' "$tmp/nm-defs"; then
		echo "check-calls: $name ($lib) defines no symbol" >&2
		exit 1
	fi
	# "RANK NAME SYMBOL" for every function or object a module defines.
	awk -v r="$rank" -v n="$name" 'NF == 3 { print r, n, $3 }' "$tmp/nm-defs" >>"$tmp/defs"
	awk -v r="$rank" -v n="$name" '{ print r, n, $NF }' "$tmp/nm-uses" | sort -u >>"$tmp/uses"
done

# Join each use with its definition and keep those that point up.
awk 'NR == FNR { rank[$3] = $1; mod[$3] = $2; next }
     ($3 in rank) && rank[$3] > $1 {
	printf "check-calls: %s calls %s, defined by %s, a layer above it\n", $2, $3, mod[$3]
	bad = 1
     }
     END { exit bad }' "$tmp/defs" "$tmp/uses" >&2 || {
	echo "check-calls: FAILED" >&2
	exit 1
}
echo "check-calls: every call goes down a layer ($# modules)"
