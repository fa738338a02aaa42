#!/usr/bin/env bash
# Packs a Meson build tree so that it runs on a GPU machine that has the
# NVIDIA driver but none of the build's -dev libraries (libuv, cJSON, cmocka,
# libsystemd) and no package registry: the build tree's programs and
# libraries, the non-system shared libraries they need, and (when the network
# is there) a numpy wheel the GPU machine's numba-cuda can compile kernels
# with. tools/gpu-check.sh runs everything from it (docs/cuda.md, top).
#
#   usage: tools/gpu-bundle.sh [--no-wheels] [BUILD_DIR=build] [BUNDLE_DIR=.gpu]
#
# Result (BUNDLE_DIR; inside the repository it is added to .git/info/exclude,
# so it travels with the working tree only where it is carried):
#   BUNDLE_DIR/build/...   the build tree's programs, libraries and scripts in
#                          their relative layout (Meson's $ORIGIN rpaths keep
#                          working), symbolic links replaced by the files they
#                          name (a carried link may not travel)
#   BUNDLE_DIR/lib/        every shared library they need that is not glibc,
#                          the compiler's runtime or the NVIDIA driver, and
#                          libgpubroker.so.0 (and libgpubroker-torch.so.0)
#                          as real files
#   BUNDLE_DIR/whl/        numpy 2.3.5 for CPython 3.12 (manylinux), when pip
#                          could download it: numba-cuda 0.30.4 cannot compile
#                          kernels with numpy 2.5 (np.row_stack is gone)
#   BUNDLE_DIR/BUNDLE      what was packed: commit, date, build directory
#   BUNDLE_DIR/run.sh      runs its arguments with the bundled libraries (from
#                          the repository root, "build" linked to the bundle's)
#
# The build tree is always packed as "build", whatever BUILD_DIR was called.
set -euo pipefail

wheels=1
if [ "${1:-}" = --no-wheels ]; then
	wheels=0
	shift
fi
build=${1:-build}
out=${2:-.gpu}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Relative paths are taken from the repository root, as the usage says.
case $build in /*) ;; *) build=$top/$build ;; esac
case $out in /*) ;; *) out=$top/$out ;; esac
[ -f "$build/build.ninja" ] || {
	echo "gpu-bundle: '$build' is no Meson build directory (meson setup, ninja first)" >&2
	exit 2
}
build=$(cd "$build" && pwd)
case $out in / | "$top" | "$build")
	echo "gpu-bundle: refusing to use '$out' as the bundle" >&2
	exit 2
	;;
esac

# Ignored by git when inside the repository (the device tool carries ignored
# folders only when named; an untracked one would travel on every call).
case $out in "$top"/*)
	exclude=$(git -C "$top" rev-parse --git-path info/exclude 2>/dev/null || true)
	case $exclude in /*) ;; ?*) exclude=$top/$exclude ;; esac
	rel=/${out#"$top"/}/
	if [ -n "$exclude" ] && ! grep -qxF "$rel" "$exclude" 2>/dev/null; then
		mkdir -p "$(dirname "$exclude")"
		echo "$rel" >>"$exclude"
	fi
	;;
esac

rm -rf "$out"
mkdir -p "$out/build" "$out/lib"

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# The build tree's files, links resolved: programs, shared objects, scripts
# and data the tests read. Object files, static archives, Meson's own
# bookkeeping and the unit and fuzz tests (which need no GPU) stay behind:
# the device tool carries 64 MiB in all. A link to a missing file is left out.
while IFS= read -r -d '' f; do
	rel=${f#"$build"/}
	case $rel in
	*.o | *.a | meson-private/* | meson-logs/* | meson-info/* | *.p/* | */venv/* | */venv-*/* | \
		tests/pool/* | tests/policy/* | tests/proto/* | tests/broker/* | \
		tests/dispatch/* | tests/conf/* | tests/layout/* | tests/core/* | tests/docs/* | \
		tests/fuzz/*) continue ;;
	esac
	[ -e "$f" ] || continue
	mkdir -p "$out/build/$(dirname "$rel")"
	cp -pL "$f" "$out/build/$rel"
done < <(find "$build" \( -type f -o -type l \) -print0)

# The non-system shared libraries the ELF files need (ldd resolves them
# here; on the GPU machine run.sh and gpu-check.sh put lib/ first). glibc,
# the compiler's runtime and the driver are the GPU machine's own; the fake
# driver (tests/fakecuda) is never bundled as a dependency (nothing links it).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libnvidia|libgcc_s|libstdc\+\+)'
while IFS= read -r -d '' f; do
	is_elf "$f" || continue
	{ ldd "$f" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
		while read -r name path; do
			[[ $name =~ $skip ]] && continue
			case $path in "$build"/*) continue ;; esac
			[ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
		done
done < <(find "$out/build" -type f -print0)
# The name the test programs and the Python package ask for, as a file.
if [ -e "$build/client/libgpubroker.so.0" ]; then
	cp -L "$build/client/libgpubroker.so.0" "$out/lib/libgpubroker.so.0"
else
	echo "gpu-bundle: no client/libgpubroker.so.0 in '$build'" >&2
	exit 1
fi
# gpubroker.torch looks for libgpubroker-torch beside libgpubroker (a build
# without a C++ compiler has none: the torch test then says so).
if [ -e "$build/client/libgpubroker-torch.so.0" ]; then
	cp -L "$build/client/libgpubroker-torch.so.0" "$out/lib/libgpubroker-torch.so.0"
fi

# numpy for the GPU machine's python3 (3.12), when pip reaches its index.
# A failed download is not an error: the check says the Python tests then
# run with the machine's numpy.
if [ "$wheels" = 1 ]; then
	mkdir -p "$out/whl"
	if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d "$out/whl" numpy==2.3.5 >"$out/whl/pip.log" 2>&1; then
		rm -f "$out/whl/pip.log"
	else
		echo "gpu-bundle: no numpy wheel (pip download failed: $out/whl/pip.log)" >&2
	fi
fi

{
	echo "commit $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
		[ -n "$(git -C "$top" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with local changes)')"
	echo "date $(date -u +%FT%TZ)"
	echo "build $build"
	echo "host $(uname -srm)"
} >"$out/BUNDLE"

cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs its arguments with the bundled libraries first on LD_LIBRARY_PATH,
# from the repository root when the bundle sits in one (.gpu), where "build"
# is made a link to the bundled build tree if there is none (docs/cuda.md:
# bash .gpu/run.sh build/tests/gpu/test-gpu-alloc).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -f "$here/../tools/gpu-check.sh" ]; then
	cd "$here/.." || exit 1
	[ -e build ] || ln -s "$here/build" build
fi
exec "$@"
EOF
chmod +x "$out/run.sh"

echo "gpu-bundle: $(du -sh "$out" | cut -f1) in $out (the device tool carries at most 64 MiB with the working tree)"
for f in "$out"/lib/* "$out"/whl/*; do
	[ -e "$f" ] && echo "gpu-bundle: ${f#"$out"/}"
done
exit 0
