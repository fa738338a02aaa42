#!/bin/sh
# gpubroker-nvidia-nodes: makes the NVIDIA device nodes of every GPU before
# the sandboxed daemon starts (gpubroker.service's ExecStartPre=, run as
# root outside the sandbox).
#
# Early in boot, before anything used a GPU, /dev/nvidiaN and /dev/nvidia-uvm
# may be missing; libcuda would make them by running the setuid
# nvidia-modprobe, which the daemon's sandbox forbids (NoNewPrivileges=, no
# capabilities, RestrictSUIDSGID=). So this runs nvidia-modprobe first:
#   -u -c=0      loads nvidia and nvidia-uvm, makes /dev/nvidiactl,
#                /dev/nvidia0 and /dev/nvidia-uvm*;
#   -c=N         for every other GPU the driver lists in
#                /proc/driver/nvidia/gpus/*/information ("Device Minor: N"),
#                read after the first call, which loads the module.
# One call per node: nothing here relies on nvidia-modprobe taking -c twice.
#
#   usage: gpubroker-nvidia-nodes [GPUS_DIR [NVIDIA_MODPROBE]]
# (the defaults are /proc/driver/nvidia/gpus and /usr/bin/nvidia-modprobe;
# tests/systemd/test-units.sh passes stand-ins). Without nvidia-modprobe it
# does nothing and exits 0 (a machine without a GPU still starts the
# daemon; nvidia-persistenced, where it runs, has made the nodes already).
# Exit status: that of the last failed call, else 0.
set -u
gpus=${1:-/proc/driver/nvidia/gpus}
modprobe=${2:-/usr/bin/nvidia-modprobe}

if [ ! -x "$modprobe" ]; then
	echo "gpubroker-nvidia-nodes: no $modprobe: device nodes left as they are"
	exit 0
fi
rc=0
"$modprobe" -u -c=0 || rc=$?
for info in "$gpus"/*/information; do
	[ -f "$info" ] || continue
	minor=$(sed -n 's/^Device Minor:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$info")
	case $minor in
	'' | 0) continue ;;
	esac
	"$modprobe" -c="$minor" || rc=$?
done
exit "$rc"
