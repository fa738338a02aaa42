#!/bin/sh
# Installs the Debian 12 packages gpubroker needs to build and test, when
# any is missing. Sourced by quickstart.sh and test.sh. Every module a
# python test imports with pytest.importorskip is here as python3-MODULE
# (test test-packages checks it), and under test.sh, which exports
# GPB_TEST_PACKAGES=installed, such a test fails rather than skips.
# python3-venv and python3-numba: the frameworks suite (tests/frameworks:
# a virtual environment from PyPI, and Debian's Numba 0.56) and
# test_cubie_pypi.py (cubie from PyPI, tests/python/requirements-cubie.txt).
# libncurses-dev: gpubrokerctl top's screen; tmux: its test (test_top.py).
# slurm-wlm, munge and libslurm-dev: the SPANK plugin (slurm/) builds
# against spank.h, and the slurm suite runs a private Slurm with them.
GPB_PACKAGES="meson ninja-build pkg-config gcc g++ libc6-dev libuv1-dev libcjson-dev libcmocka-dev libsystemd-dev libncurses-dev tmux scdoc valgrind python3-pytest python3-pip python3-numpy python3-venv python3-numba slurm-wlm munge libslurm-dev"
# Only for the libFuzzer build of tools/fuzz.sh (clang 14 and its libFuzzer).
GPB_FUZZ_PACKAGES="clang libclang-rt-14-dev"

# gpb_install_deps [PACKAGES]: default $GPB_PACKAGES.
gpb_install_deps() {
	missing=""
	for p in ${1:-$GPB_PACKAGES}; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "gpubroker: missing packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
		return 1
	fi
	echo "gpubroker: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends $missing ||
		{ apt-get update && apt-get install -y --no-install-recommends $missing; }
}

# Configures (once) and builds a build directory: gpb_build DIR [meson args]
gpb_build() {
	dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		# -Dpython=enabled: a missing pytest-3 fails here, loudly, rather
		# than leaving the python suite out.
		meson setup "$dir" -Dwerror=true -Dpython=enabled "$@" || return 1
	fi
	ninja -C "$dir"
}
