#!/bin/sh
# `meson install` into a temporary DESTDIR, then an outside program built
# with `pkg-config --cflags --libs gpubroker` against what was installed,
# run with LD_LIBRARY_PATH there. Also checks that the daemon, CLI, library
# (with its SONAME), header, pkg-config file, example configuration and, when
# built, the man pages and systemd units are where they belong, and that no
# installed program points back into the build tree.
# Writes only under a temporary directory (and Meson's own install log in
# the build directory).
# Usage: test-install.sh BUILD_DIR (the rest comes from the environment Meson
# sets: GPB_CC, GPB_SANITIZE, GPB_VERSION, GPB_PREFIX, GPB_*DIR,
# GPB_HAVE_MAN, GPB_SYSTEMD_UNITS, MESON)
set -u
build=$1
for v in GPB_CC GPB_VERSION GPB_PREFIX GPB_BINDIR GPB_SBINDIR GPB_LIBDIR GPB_INCLUDEDIR \
	GPB_MANDIR GPB_SYSCONFDIR MESON; do
	eval "[ -n \"\${$v:-}\" ]" || {
		echo "$v is not set (run through meson test)"
		exit 1
	}
done
[ -f "$build/build.ninja" ] || {
	echo "no build directory at $build (moved?): skipped"
	exit 77
}
command -v pkg-config >/dev/null 2>&1 || {
	echo "pkg-config not found: skipped"
	exit 77
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpb-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
status=0

fail() {
	echo "FAIL: $*"
	status=1
}

# Prefix-relative directories as Meson does: absolute ones stay as they are.
abs() {
	case $1 in
	/*) echo "$1" ;;
	*) echo "$GPB_PREFIX/$1" ;;
	esac
}

# shellcheck disable=SC2086 # MESON may be a command with arguments
if ! $MESON install -C "$build" --no-rebuild --destdir "$root" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	echo "FAIL: meson install"
	exit 1
fi

bindir=$root$(abs "$GPB_BINDIR")
sbindir=$root$(abs "$GPB_SBINDIR")
libdir=$root$(abs "$GPB_LIBDIR")
includedir=$root$(abs "$GPB_INCLUDEDIR")
mandir=$root$(abs "$GPB_MANDIR")
sysconfdir=$root$(abs "$GPB_SYSCONFDIR")

for f in "$sbindir/gpubrokerd" "$bindir/gpubrokerctl"; do
	[ -x "$f" ] || fail "$f not installed"
done
[ -f "$includedir/gpubroker.h" ] || fail "gpubroker.h not installed in $includedir"
[ -f "$sysconfdir/gpubroker/gpubroker.conf" ] || fail "no example gpubroker.conf in $sysconfdir"
lib=$libdir/libgpubroker.so.0
[ -e "$lib" ] || fail "$lib not installed"
[ -L "$libdir/libgpubroker.so" ] || fail "no libgpubroker.so development link"
pc=$libdir/pkgconfig/gpubroker.pc
[ -f "$pc" ] || fail "$pc not installed"

if command -v readelf >/dev/null 2>&1; then
	readelf -d "$lib" | grep -q 'Library soname: \[libgpubroker.so.0\]' ||
		fail "libgpubroker's SONAME is not libgpubroker.so.0"
	for f in "$sbindir/gpubrokerd" "$bindir/gpubrokerctl" "$lib"; do
		if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF "$build"; then
			fail "$f points into the build tree: $(readelf -d "$f" | grep -E 'R(UN)?PATH')"
		fi
	done
fi

if [ "${GPB_HAVE_MAN:-0}" = 1 ]; then
	for page in man8/gpubrokerd.8 man1/gpubrokerctl.1 man3/gpubroker.3 man5/gpubroker.conf.5; do
		[ -s "$mandir/$page" ] || fail "man page $page not installed"
	done
else
	echo "scdoc not found at configure time: man pages not checked"
fi

if [ "${GPB_SYSTEMD_UNITS:-0}" = 1 ]; then
	unit=$(find "$root" -name gpubroker.service | head -n 1)
	if [ -z "$unit" ]; then
		fail "systemd_units is on but gpubroker.service was not installed"
	else
		grep -q "^ExecStart=$(abs "$GPB_SBINDIR")/gpubrokerd" "$unit" ||
			fail "ExecStart= in $unit does not name the installed daemon"
		! grep -n '@[a-z_]*@' "$unit" || fail "$unit has unfilled template variables"
		[ -f "$(dirname "$unit")/gpubroker.socket" ] || fail "gpubroker.socket not installed"
		nodes=$(abs "$GPB_LIBEXECDIR")/gpubroker-nvidia-nodes
		[ -x "$root$nodes" ] || fail "$nodes (the unit's ExecStartPre) not installed executable"
		grep -q "^ExecStartPre=+-$nodes\$" "$unit" ||
			fail "ExecStartPre= in $unit does not name the installed $nodes"
		[ -n "$(find "$root" -path '*sysusers.d/gpubroker.conf')" ] || fail "no sysusers.d snippet"
		[ -n "$(find "$root" -path '*tmpfiles.d/gpubroker.conf')" ] || fail "no tmpfiles.d snippet"
	fi
fi

# A reinstall keeps an edited configuration.
echo "log_level = debug" >"$sysconfdir/gpubroker/gpubroker.conf"
# shellcheck disable=SC2086
$MESON install -C "$build" --no-rebuild --destdir "$root" >"$tmp/install2.log" 2>&1 ||
	fail "second meson install: $(cat "$tmp/install2.log")"
[ "$(cat "$sysconfdir/gpubroker/gpubroker.conf")" = "log_level = debug" ] ||
	fail "a reinstall replaced the operator's gpubroker.conf"

# The outside program: only what the installed pkg-config file says.
cat >"$tmp/outside.c" <<'C'
#include <gpubroker.h>
#include <stdio.h>

int main(void)
{
	printf("%s\n", gpb_version());
	return gpb_strerror(GPB_E_CONNECT)[0] == '\0';
}
C
flags=$(PKG_CONFIG_LIBDIR=$(dirname "$pc") PKG_CONFIG_PATH='' PKG_CONFIG_SYSROOT_DIR=$root \
	pkg-config --cflags --libs gpubroker) || {
	echo "FAIL: pkg-config --cflags --libs gpubroker"
	exit 1
}
echo "pkg-config: $flags"
# A sanitized library needs the sanitizer runtime in the program too.
san=
if [ -n "${GPB_SANITIZE:-}" ] && [ "$GPB_SANITIZE" != none ]; then
	san=-fsanitize=$GPB_SANITIZE
fi
# shellcheck disable=SC2086 # word splitting of the compiler and flags is wanted
if ! $GPB_CC $san -o "$tmp/outside" "$tmp/outside.c" $flags; then
	echo "FAIL: the outside program does not build"
	exit 1
fi
out=$(LD_LIBRARY_PATH=$libdir "$tmp/outside") || fail "the outside program failed"
[ "$out" = "$GPB_VERSION" ] || fail "gpb_version() said '$out', expected '$GPB_VERSION'"
if command -v ldd >/dev/null 2>&1; then
	loaded=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/outside" | grep libgpubroker)
	case $loaded in
	*"=> $libdir/"*) ;;
	*) fail "the outside program did not load the installed library: $loaded" ;;
	esac
fi
ctl=$(LD_LIBRARY_PATH=$libdir "$bindir/gpubrokerctl" --version) || fail "installed gpubrokerctl --version"
echo "$ctl"
[ "$ctl" = "gpubrokerctl $GPB_VERSION (libgpubroker $GPB_VERSION)" ] ||
	fail "unexpected version line from the installed gpubrokerctl"

# The Python package (-Dpython): in the interpreter's pure-Python directory,
# naming the installed library, importable from there.
if [ -n "${GPB_PYTHON:-}" ]; then
	pkg=$root$(abs "$GPB_PYTHON_PURELIB")/gpubroker
	for f in __init__.py client.py numba.py cupy.py _config.py _schema.py; do
		[ -f "$pkg/$f" ] || fail "python package file $pkg/$f not installed"
	done
	grep -qx "LIBRARY = \"$(abs "$GPB_LIBDIR")/libgpubroker.so.0\"" "$pkg/_config.py" ||
		fail "_config.py does not name the installed library: $(cat "$pkg/_config.py")"
	# A sanitized library cannot be loaded into an uninstrumented python.
	if [ -z "$san" ]; then
		pyver=$(PYTHONPATH=$(dirname "$pkg") GPUBROKER_LIBRARY=$lib PYTHONDONTWRITEBYTECODE=1 \
			"$GPB_PYTHON" -c 'import gpubroker; print(gpubroker.library_version())') ||
			fail "the installed python package does not import"
		[ "$pyver" = "$GPB_VERSION" ] || fail "gpubroker.library_version() said '$pyver'"
	fi
fi

[ $status -eq 0 ] && echo "installed into a temporary DESTDIR; an outside program builds and runs with gpb_version() = $out"
exit $status
