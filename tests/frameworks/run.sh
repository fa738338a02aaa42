#!/bin/sh
# Runs one test file of the frameworks suite: the Python bridges under real
# Numba and CuPy, against a cuda-backend gpubrokerd on the fake driver.
#   run.sh venv|debian TEST-FILE [pytest arguments]
# venv: the virtual environment $GPB_FRAMEWORKS_VENV (numba-cuda, CuPy: the
# pinned tests/frameworks/requirements.txt), made on first use and remade
# only when that file changed (a CI run downloads once). debian: Debian's
# /usr/bin/python3 and its python3-numba, through pytest-3.
# Environment (tests/frameworks/meson.build): GPB_FRAMEWORKS_VENV,
# GPB_FRAMEWORKS_REQUIREMENTS, GPB_FAKECUDA_DIR (the fake libcuda.so.1's
# folder), GPUBROKERD, GPUBROKER_LIBRARY, GPUBROKERCTL.
set -eu
kind=$1
test=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)

venv_ready() {
	[ -x "$GPB_FRAMEWORKS_VENV/bin/python" ] &&
		cmp -s "$GPB_FRAMEWORKS_REQUIREMENTS" "$GPB_FRAMEWORKS_VENV/requirements.txt"
}

# What a test needs and cannot have: a failure under tools/test.sh, which
# says every package is installed (GPB_TEST_PACKAGES=installed); elsewhere
# (no network, no python3-numba) a skip, exit 77, saying why.
missing() {
	echo "frameworks: $1" >&2
	[ "${GPB_TEST_PACKAGES:-}" = installed ] && exit 1
	exit 77
}

# One maker at a time: the suite's tests start together.
make_venv() {
	mkdir -p "$(dirname "$GPB_FRAMEWORKS_VENV")"
	exec 9>"$GPB_FRAMEWORKS_VENV.lock"
	flock 9
	if ! venv_ready; then
		echo "frameworks: installing $GPB_FRAMEWORKS_REQUIREMENTS into $GPB_FRAMEWORKS_VENV"
		rm -rf "$GPB_FRAMEWORKS_VENV"
		/usr/bin/python3 -m venv "$GPB_FRAMEWORKS_VENV"
		"$GPB_FRAMEWORKS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
			--no-input -r "$GPB_FRAMEWORKS_REQUIREMENTS" || missing "pip could not install them"
		# Written last: a venv without it is remade.
		cp "$GPB_FRAMEWORKS_REQUIREMENTS" "$GPB_FRAMEWORKS_VENV/requirements.txt"
	fi
	exec 9>&-
}

case $kind in
venv)
	make_venv
	pytest="$GPB_FRAMEWORKS_VENV/bin/python -m pytest"
	;;
debian)
	/usr/bin/python3 -c 'import numba.cuda' 2>/dev/null ||
		missing "Debian's python3-numba is not installed (tools/deps.sh installs it)"
	pytest=pytest-3
	;;
*)
	echo "run.sh: venv or debian, not $kind" >&2
	exit 2
	;;
esac

# The fake driver for everything that loads libcuda.so.1: the daemon, the
# library, cuda-bindings (by name) and Debian's Numba (NUMBA_CUDA_DRIVER).
# Its state in a folder of this run's own: what another test allocates is
# not in this one's cuMemGetInfo.
state=$(mktemp -d "${TMPDIR:-/tmp}/gpb-frameworks-XXXXXX")
trap 'rm -rf "$state"' EXIT
export FAKECUDA_DIR="$state"
export LD_LIBRARY_PATH="$GPB_FAKECUDA_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NUMBA_CUDA_DRIVER="$GPB_FAKECUDA_DIR/libcuda.so.1"
export PYTHONDONTWRITEBYTECODE=1
# shellcheck disable=SC2086 # $pytest is a command and its arguments
$pytest -p no:cacheprovider -q -rs --rootdir "$here" "$here/$test" "$@"
