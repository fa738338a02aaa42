#!/bin/sh
# The tests that run programs as another user pass from a tree that user
# cannot reach: a clone under /root (mode 0700), where a new user's first run
# puts it (the README's quick start as root). What they need is copied,
# in the build tree's layout, into a folder of mode 0700 and run from
# there: e2e-access (gpubrokerctl run as nobody) and, with PYTEST, the
# python tests that run a helper as nobody. Each must pass, none skip.
# Usage: check-hidden-tree.sh TEST-E2E-ACCESS GPUBROKERD GPUBROKERCTL LIBGPUBROKER SOURCE-ROOT [PYTEST]
# (the python part takes the rest of its environment, LD_PRELOAD under ASan,
# from Meson's).
set -eu
if [ "$(id -u)" != 0 ]; then
	echo "not root: cannot run clients as other users"
	exit 77
fi
access=$1 daemon=$2 ctl=$3 lib=$4 src=$5 pytest=${6:-}
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[ -n "$soname" ] || { echo "no SONAME in $lib"; exit 1; }

hidden=$(mktemp -d /tmp/gpb-hidden-XXXXXX)
trap 'rm -rf "$hidden"' EXIT
chmod 0700 "$hidden"
tree=$hidden/gpubroker
mkdir -p "$tree/client/ctl" "$tree/daemon" "$tree/tests/e2e" "$tree/tests/python"
cp "$lib" "$tree/client/$soname"
cp "$ctl" "$tree/client/ctl/"
cp "$daemon" "$tree/daemon/"
cp "$access" "$tree/tests/e2e/"
cp -R "$src/python" "$tree/python"
cp "$src/tests/python/conftest.py" "$src/tests/python/test_errors.py" \
	"$src/tests/python/test_share.py" "$tree/tests/python/"
# Everything inside may be read by all: only the folder above hides it.
chmod -R a+rX "$tree"
cd "$tree"
# Meson points it at the build tree's library (an argument above): the
# copies must do without.
unset LD_LIBRARY_PATH

echo "# e2e-access from $tree"
GPB_DAEMON=$tree/daemon/$(basename "$daemon") GPB_CTL=$tree/client/ctl/$(basename "$ctl") \
	"$tree/tests/e2e/$(basename "$access")"

[ -n "$pytest" ] || exit 0
echo "# python tests run as nobody from $tree"
out=$hidden/pytest.out
GPUBROKERD=$tree/daemon/$(basename "$daemon") GPUBROKER_LIBRARY=$tree/client/$soname \
	GPUBROKERCTL=$tree/client/ctl/$(basename "$ctl") PYTHONDONTWRITEBYTECODE=1 \
	"$pytest" -p no:cacheprovider -q -rs --rootdir "$tree/tests/python" \
	"$tree/tests/python/test_errors.py::test_permission_for_non_administrators" \
	"$tree/tests/python/test_share.py::test_other_user_opens" >"$out" 2>&1 ||
	{ cat "$out"; exit 1; }
cat "$out"
# pytest exits 0 when everything skipped: both must have run.
grep -q "^2 passed" "$out" || { echo "expected 2 passed"; exit 1; }
