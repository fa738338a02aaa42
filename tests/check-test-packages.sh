#!/bin/sh
# Every module a python test imports with pytest.importorskip (the gpu
# suite's aside: numba and cupy come with a GPU) is a Debian package that
# tools/deps.sh installs, python3-MODULE, so that tools/test.sh runs those
# tests rather than skipping them on a fresh machine.
# Usage: check-test-packages.sh SOURCE-ROOT
set -eu
top=$1
. "$top/tools/deps.sh"
modules=$(grep -ho 'importorskip("[A-Za-z0-9_]*")' "$top"/tests/python/*.py |
	sed 's/importorskip("\(.*\)")/\1/' | sort -u)
[ -n "$modules" ] || { echo "no pytest.importorskip in tests/python (moved?)"; exit 1; }
missing=""
for m in $modules; do
	p=python3-$(echo "$m" | tr 'A-Z_' 'a-z-')
	case " $GPB_PACKAGES " in
	*" $p "*) echo "ok: $m ($p)" ;;
	*) missing="$missing $p" ;;
	esac
done
if [ -n "$missing" ]; then
	echo "tests/python imports modules whose packages tools/deps.sh does not install:$missing" >&2
	exit 1
fi
