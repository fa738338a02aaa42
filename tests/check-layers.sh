#!/bin/sh
# No #include goes up a layer or sideways.
#
#   tests/check-layers.sh [SOURCE_ROOT]
#
# The layers are the table in tests/layers.table (check-calls.sh reads the
# same one). Every module is one folder. A module may include its own headers
# and those of the modules listed after it in the table (the whole list, not
# only the layer right under it: a layer may skip the ones between). An
# #include "x.h" of a header that lives in any other module's folder is a
# layer going up (or sideways) and fails, as does an include of a header no module holds.
# Meson gives each module's library only the include directories of the
# modules below it, so such an include does not compile either; this check
# says which rule it broke, and also catches what the build cannot see:
# lower layers that include JSON or libuv headers, or proto.h (which brings
# cJSON) where only the protocol's constants (schema.h) may go.
#
# Exits 0, or 1 naming every offending line.
set -eu
top=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
found=$(mktemp)
trap 'rm -f "$found"' EXIT INT TERM

# "module folder may-include..." rows, comments and blank lines dropped.
layers=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' tests/layers.table)
# Modules that speak no JSON and run no event loop.
no_json='common schema log pool policy backend broker conf'

# schema.h is the protocol's constants alone: its own module, in proto/.
module_of_header() {
	case $1 in
	schema.h) echo schema; return ;;
	config.h) echo config; return ;;
	esac
	echo "$layers" | while read -r mod dir _; do
		[ -n "$mod" ] || continue
		[ "$mod" = schema ] && continue
		if [ -f "$dir/$1" ]; then
			echo "$mod"
			break
		fi
	done
}

fail=0
report() {
	echo "check-layers: $*" >&2
	fail=1
}

echo "$layers" | while read -r dir_mod dir dir_allowed; do
	[ -n "$dir_mod" ] || continue
	[ "$dir_mod" = schema ] && continue
	for f in "$dir"/*.c "$dir"/*.h; do
		[ -f "$f" ] || continue
		# schema.h is a module of its own inside proto/: its rules, not proto's.
		mod=$dir_mod
		allowed=$dir_allowed
		if [ "$f" = proto/schema.h ]; then
			mod=schema
			allowed=$(echo "$layers" | awk '$1 == "schema" { $1 = $2 = ""; print }')
		fi
		# Includes of the project's own headers.
		sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
			while read -r h; do
				case $h in
				*/*)
					echo "check-layers: $f: #include \"$h\": name headers by file name; the build's include directories say which modules are visible" >&2
					echo x
					continue
					;;
				esac
				[ "$h" = "$(basename "$f")" ] && continue
				hm=$(module_of_header "$h")
				case $hm in
				"")
					echo "check-layers: $f: #include \"$h\": no module holds that header" >&2
					echo x
					;;
				config | "$mod") ;;
				*)
					case " $allowed " in
					*" $hm "*) ;;
					*)
						echo "check-layers: $f: #include \"$h\": $mod may not include $hm (it may include: $allowed)" >&2
						echo x
						;;
					esac
					;;
				esac
			done
		# System headers the lower layers must not see.
		case " $no_json " in
		*" $mod "*)
			grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*<\(cjson/\|uv\.h\|uv/\)' "$f" |
				while IFS= read -r line; do
					echo "check-layers: $f:$line: $mod is below the JSON and libuv layers" >&2
					echo x
				done
			;;
		esac
	done
done >"$found"
if [ -s "$found" ]; then
	fail=1
fi

# Every folder with sources is a module of the table (a new folder must say
# where it stands).
for d in common proto include daemon daemon/* client client/* slurm; do
	[ -d "$d" ] || continue
	ls "$d"/*.[ch] >/dev/null 2>&1 || continue
	echo "$layers" | awk -v d="$d" '$2 == d { found = 1 } END { exit !found }' ||
		report "$d: a folder of sources that is no module of the layer table"
done

if [ "$fail" -ne 0 ]; then
	echo "check-layers: FAILED (the table is tests/layers.table; docs/design.md explains it)" >&2
	exit 1
fi
echo "check-layers: every include goes down a layer"
