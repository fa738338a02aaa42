#!/bin/sh
# Inside one module, the files call in one direction: check-calls.sh's
# twin for a module's own files.
#
#   tests/check-file-order.sh ARCHIVE FILE...
#
# ARCHIVE is the module's static library; FILE... its sources from the bottom
# up, in the order the module's meson.build lists them (the header that
# documents them says why). A file may call what the files before it define,
# never what a file after it defines: such a call closes a circle between
# files that were split for size, or hides a layer inside the module. A lower
# file reaches an upper one only through a callback it is handed. Every
# object of the archive must be named.
#
# Exits 0, 1 naming every upward call, or 2 on a usage error.
set -eu
[ $# -gt 1 ] || {
	echo "usage: $0 ARCHIVE FILE..." >&2
	exit 2
}
archive=$1
shift
[ -f "$archive" ] || {
	echo "check-file-order: $archive: no such archive" >&2
	exit 2
}
# "member T|U symbol" for every global symbol the members define or use.
nm -A "$archive" | awk -v archive="$archive" '
	{
		# "ARCHIVE:MEMBER:ADDRESS T sym" or "ARCHIVE:MEMBER: U sym"; in a thin
		# archive, MEMBER is a path.
		member = substr($1, length(archive) + 2)
		sub(/:[^:]*$/, "", member)
		n = split(member, path, "/"); member = path[n]; sub(/\.o$/, "", member)
		type = NF == 3 ? $2 : $3; sym = NF == 3 ? $3 : $4
		if (type ~ /^[TDBR]$/ || type == "U")
			print member, (type == "U" ? "U" : "D"), sym
	}' | awk -v order="$*" '
	BEGIN { n = split(order, files, " "); for (i = 1; i <= n; i++) rank[files[i]] = i }
	{ seen[$1] = 1 }
	$2 == "D" { def[$3] = $1 }
	$2 == "U" { uses[++u] = $1 " " $3 }
	END {
		bad = 0
		for (m in seen) if (!(m in rank)) {
			print "check-file-order: " m " is not placed in the order"; bad = 1
		}
		for (i = 1; i <= n; i++) if (!(files[i] in seen)) {
			print "check-file-order: " files[i] " is not in the archive"; bad = 1
		}
		for (i = 1; i <= u; i++) {
			split(uses[i], x, " ")
			if ((x[2] in def) && (def[x[2]] in rank) && (x[1] in rank) &&
			    rank[def[x[2]]] > rank[x[1]]) {
				print "check-file-order: " x[1] " calls " x[2] " of " def[x[2]] \
				    ", a file above it"
				bad = 1
			}
		}
		exit bad
	}'
