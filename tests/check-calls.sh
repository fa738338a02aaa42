#!/bin/sh
# No call goes up a layer or sideways: the link-level twin of check-layers.sh.
#
#   tests/check-calls.sh TABLE MODULE=FILE [MODULE=FILE ...]
#
# TABLE is tests/layers.table, the one check-layers.sh reads. Each MODULE is
# a module of it; FILE is what the build made of it:
#   LIB.a or FILE.o     its static library or object (a module may be named
#                       with several: common is libgpbcommon.a and the cuda
#                       entry points' libgpbcudaapi.a);
#   LIB.a(MEMBER)       one member of an archive (schema is schema.c.o of
#                       proto's library); the rest of the archive stays with
#                       the module the whole archive is named for;
#   LIB.so              a shared library: the functions it exports are
#                       MODULE's (public: libgpubroker.so's gpb_*) for a
#                       program over it, not for the modules linked into it;
#   -                   not built in this configuration (spank without
#                       Slurm's headers); said, not checked.
# Every module of the table whose folder holds C sources must be named.
#
# A function that one module uses (an undefined symbol of its files) and
# another module defines must belong to a module the user may include, as
# the table says, followed through: a module may call what the modules it
# may include may call (ctl calls proto, proto calls common: ctl may call
# common). A call up a layer or sideways ties two modules together even when
# no header says so (a prototype written by hand, a callback called by
# name), which check-layers.sh cannot see. A function defined by two modules
# (but each program's main) is an error too: one piece of code for one piece
# of logic.
#
# Exits 0, 1 naming every such call, or 2 on a usage error.
set -eu
usage() {
	echo "usage: $0 TABLE MODULE=FILE..." >&2
	exit 2
}
[ $# -gt 1 ] || usage
table=$1
shift
[ -f "$table" ] || {
	echo "check-calls: $table: no such table" >&2
	exit 2
}
top=$(cd "$(dirname "$table")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$table" >"$tmp/table"

# The members named one by one, taken out of their archive's module.
: >"$tmp/claimed"
for arg in "$@"; do
	case ${arg#*=} in
	*.a\(*\))
		spec=${arg#*=}
		echo "${spec%%(*} ${spec#*(}" | sed 's/)$//' >>"$tmp/claimed"
		;;
	esac
done

# "MODULE D|U|X SYMBOL" for what each file defines, uses and exports.
: >"$tmp/syms"
: >"$tmp/named"
for arg in "$@"; do
	case $arg in
	*=*) ;;
	*) usage ;;
	esac
	mod=${arg%%=*}
	file=${arg#*=}
	awk -v m="$mod" '$1 == m { found = 1 } END { exit !found }' "$tmp/table" || {
		echo "check-calls: $mod: no module of $table" >&2
		exit 2
	}
	echo "$mod" >>"$tmp/named"
	if [ "$file" = - ]; then
		echo "check-calls: $mod is not built in this configuration"
		continue
	fi
	member=
	case $file in
	*.a\(*\))
		member=${file#*(}
		member=${member%)}
		file=${file%%(*}
		;;
	esac
	[ -f "$file" ] || {
		echo "check-calls: $mod: $file: no such file" >&2
		exit 2
	}
	# nm to files first: in a pipeline its failure would go unseen.
	case $file in
	*.so | *.so.*)
		nm -D -P --defined-only "$file" >"$tmp/nm-defs"
		awk -v m="$mod" '$2 != "A" { sub(/@.*/, "", $1); print m, "X", $1 }' \
			"$tmp/nm-defs" >"$tmp/these"
		;;
	*)
		nm -A -P -g --defined-only "$file" >"$tmp/nm-defs"
		nm -A -P -u "$file" >"$tmp/nm-uses"
		# "file[member]:" or "file:" first; keep this spec's members.
		awk -v m="$mod" -v f="$file" -v only="$member" '
			NR == FNR { if ($1 == f) claimed[$2] = 1; next }
			{
				src = $1
				sub(/:$/, "", src)
				mem = ""
				if (src ~ /\]$/) {
					mem = src
					sub(/^[^[]*\[/, "", mem)
					sub(/\]$/, "", mem)
					sub(/.*\//, "", mem)
				}
				if (only != "" ? mem != only : (mem in claimed))
					next
				print m, (FILENAME ~ /nm-uses$/ ? "U" : "D"), $2
			}' "$tmp/claimed" "$tmp/nm-defs" "$tmp/nm-uses" | sort -u >"$tmp/these"
		;;
	esac
	# A file that defines nothing is a wrong path or an empty build: it
	# would make every check vacuous.
	if ! grep -q ' [DX] ' "$tmp/these"; then
		echo "check-calls: $mod ($arg) defines no symbol" >&2
		exit 1
	fi
	cat "$tmp/these" >>"$tmp/syms"
done

# Every module with C sources in its folder is checked (or said to be
# absent): a library or program left out of the list would pass unseen.
fail=0
while read -r mod dir _; do
	case $mod in
	schema) set -- "$top/proto/schema.c" ;;
	*) set -- "$top/$dir"/*.c ;;
	esac
	[ -f "$1" ] || continue
	grep -qx "$mod" "$tmp/named" || {
		echo "check-calls: $mod ($dir) has C sources but no library or program of it was named" >&2
		fail=1
	}
done <"$tmp/table"

# Join each use with its definition against the table's closure. The C
# library's functions that a module defines in its place (the interposer's
# dlsym, client/intercept) are the C library's to every other module.
awk -v interposed="dlsym" '
	BEGIN { n_ip = split(interposed, ip, " "); for (i = 1; i <= n_ip; i++) libc[ip[i]] = 1 }
	FILENAME ~ /table$/ {
		mods[$1] = 1
		order[++nmods] = $1
		for (i = 3; i <= NF; i++)
			if ($i != "-")
				may[$1, $i] = 1
		next
	}
	# Every program has its own main.
	$2 == "D" && $3 == "main" { next }
	($3 in libc) { next }
	$2 == "D" {
		if (($3 in owner) && owner[$3] != $1) {
			printf "check-calls: %s is defined by both %s and %s\n", $3, owner[$3], $1
			bad = 1
		}
		owner[$3] = $1
		next
	}
	$2 == "X" { exporter[$3] = $1; next }
	{ uses[++n] = $1 " " $3 }
	END {
		# Followed through: what a module may include, it may also call
		# whatever those modules may.
		do {
			grew = 0
			for (a in mods)
				for (b in mods)
					if ((a, b) in may)
						for (c in mods)
							if (((b, c) in may) && !((a, c) in may)) {
								may[a, c] = 1
								grew = 1
							}
		} while (grew)
		# The modules linked into a shared library (those that define
		# what it exports, and all below them) call its functions as
		# what they are, not through its header.
		for (s in exporter)
			if (s in owner) {
				inside[owner[s]] = 1
				for (c in mods)
					if ((owner[s], c) in may)
						inside[c] = 1
			}
		for (i = 1; i <= n; i++) {
			split(uses[i], u, " ")
			m = u[1]
			s = u[2]
			if (!(s in owner) || owner[s] == m || ((m, owner[s]) in may))
				continue
			if ((s in exporter) && !(m in inside) &&
			    (exporter[s] == m || ((m, exporter[s]) in may)))
				continue
			o = owner[s]
			list = ""
			for (k = 1; k <= nmods; k++)
				if ((m, order[k]) in may)
					list = list " " order[k]
			printf "check-calls: %s calls %s, which %s defines: a call %s (%s may use:%s)\n", m, s, o,
			       ((o, m) in may) ? "up a layer" : "sideways", m, list == "" ? " nothing" : list
			bad = 1
		}
		exit bad
	}' "$tmp/table" "$tmp/syms" >"$tmp/found" || fail=1
if [ "$fail" -ne 0 ]; then
	sort "$tmp/found" >&2
	echo "check-calls: FAILED (the table is $table; docs/design.md explains it)" >&2
	exit 1
fi
echo "check-calls: every call goes down the table's layers ($(sort -u "$tmp/named" | wc -l) modules)"
