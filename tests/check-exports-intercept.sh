#!/bin/sh
# libgpubroker-intercept.so exports the driver entry points it answers and
# dlsym, nothing else: the client linked into it stays local (a gpb_* of its
# own would take the place of libgpubroker's in a program that loads both).
set -eu
lib=$1
want="cuDeviceTotalMem_v2 cuGetProcAddress cuGetProcAddress_v2 cuInit cuIpcGetMemHandle
cuMemAllocAsync cuMemAllocFromPoolAsync cuMemAllocManaged cuMemAllocPitch_v2 cuMemAlloc_v2
cuMemCreate cuMemFreeAsync cuMemFree_v2 cuMemGetAddressRange_v2 cuMemGetInfo_v2
cuPointerGetAttribute cuPointerGetAttributes dlsym"
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ {print $3}' | sort)
expected=$(echo "$want" | tr ' ' '\n' | grep . | sort)
if [ "$got" != "$expected" ]; then
	echo "$lib exports:" >&2
	echo "$got" >&2
	echo "expected:" >&2
	echo "$expected" >&2
	exit 1
fi
echo "ok: $(echo "$got" | wc -l) symbols, the driver entry points answered and dlsym"
