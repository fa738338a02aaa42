#!/bin/sh
# The shared library exports gpb_* symbols only, all under the version node.
set -eu
lib=$1
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^gpb_' | grep -v '^GPUBROKER_' || true)
if [ -n "$bad" ]; then
	echo "non-gpb symbols exported from $lib:" >&2
	echo "$bad" >&2
	exit 1
fi
count=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | grep -c '^gpb_')
[ "$count" -ge 18 ] || { echo "only $count gpb_ functions exported" >&2; exit 1; }
objdump -T "$lib" | grep ' gpb_' | grep -qv 'GPUBROKER_0.1' &&
	{ echo "gpb_ symbols outside the GPUBROKER_0.1 version node" >&2; exit 1; }
echo "ok: $count gpb_ functions, nothing else exported"
