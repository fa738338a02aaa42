#!/bin/sh
# docs/design.md's "Map of the tree" against the tree, both ways.
#
#   tests/docs/test-docs-map.sh SOURCE_ROOT [DESIGN_MD]
#
# Fails, naming each, when
#   - a folder of the repository (every folder that holds a tracked file,
#     and the folders above it) is not named in the map;
#   - a tracked file is not named under its folder's heading, for every
#     file but those in a subfolder of tests/ (a test folder is mapped as a
#     whole: its files are named by what they prove) and the dated reports
#     of bench/results/. Every kind of file counts, meson.build included:
#     what a folder builds, and under which option, is part of its map;
#   - the map names a file or folder that is not in the tree.
# What the map is made of (docs/design.md says it too): the section from
# "## Map of the tree" to the next "## " heading; a "### " heading names the
# folder of its first `backticked/` word (no such word: the top level); a
# line "- `NAME`: ..." names the file NAME of that folder, and a line
# "- `PATH/`, `PATH/`: ..." the folders PATH from the top. Tracked files
# are git's: outside a git checkout (a dist tarball) the test is skipped.
set -u
top=${1:?usage: test-docs-map.sh SOURCE_ROOT [DESIGN_MD]}
cd "$top" || exit 1
doc=${2:-docs/design.md}
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "docs-map: $top is not a git checkout: no list of tracked files to check the map with"
	exit 77
fi
work=$(mktemp -d /tmp/gpb-docs-map-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT

git ls-files >"$work/tracked"
[ -s "$work/tracked" ] || { echo "docs-map: git lists no file in $top"; exit 1; }
# Every folder: each file's, and each folder above it.
awk -F/ '{ p = ""; for (i = 1; i < NF; i++) { p = p $i "/"; print p } }' "$work/tracked" |
	sort -u >"$work/folders"
grep -v -E '^(tests/[^/]+/|bench/results/)' "$work/tracked" | sort -u >"$work/files"

awk -v out="$work" '
/^## / { insec = ($0 == "## Map of the tree"); next }
!insec { next }
/^### / {
	cur = ""
	if (match($0, /`[^` ]*\/`/)) {
		cur = substr($0, RSTART + 1, RLENGTH - 2)
		print cur > (out "/named-folders")
	}
	next
}
/^- `/ {
	head = $0
	end = index(head, "`: ")
	if (end) head = substr(head, 1, end)
	while (match(head, /`[^` ]+`/)) {
		name = substr(head, RSTART + 1, RLENGTH - 2)
		head = substr(head, RSTART + RLENGTH)
		if (name ~ /\/$/) print name > (out "/named-folders")
		else print cur name > (out "/named-files")
	}
}' "$doc"
touch "$work/named-folders" "$work/named-files"
sort -u -o "$work/named-folders" "$work/named-folders"
sort -u -o "$work/named-files" "$work/named-files"
if [ ! -s "$work/named-files" ]; then
	echo "docs-map: no \"## Map of the tree\" section with files in $doc"
	exit 1
fi

status=0
report() { # FILE MESSAGE
	if [ -s "$1" ]; then
		echo "docs-map: $2:"
		sed 's/^/  /' "$1"
		status=1
	fi
}
comm -23 "$work/folders" "$work/named-folders" >"$work/m1"
report "$work/m1" "folders the map in $doc does not name (add a line)"
comm -23 "$work/files" "$work/named-files" >"$work/m2"
report "$work/m2" "files the map in $doc does not name (a line under their folder's heading)"
sort -u "$work/tracked" >"$work/tracked-sorted"
comm -23 "$work/named-files" "$work/tracked-sorted" >"$work/m3"
report "$work/m3" "files the map names that are not in the tree"
comm -23 "$work/named-folders" "$work/folders" >"$work/m4"
report "$work/m4" "folders the map names that are not in the tree"
[ $status -eq 0 ] &&
	echo "docs-map: $(wc -l <"$work/named-folders") folders and $(wc -l <"$work/named-files") files mapped, none missing"
exit $status
