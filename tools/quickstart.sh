#!/bin/sh
# Quick start: install what is missing, build, and run gpubrokerd in the
# foreground on its embedded default (the simulated GPU when no driver is
# present). Ctrl-C stops it.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. tools/deps.sh
gpb_install_deps
gpb_build build

socket=${GPUBROKER_SOCKET:-/run/gpubroker/gpubroker.sock}
sockdir=$(dirname "$socket")
mkdir -p "$sockdir"
chmod 0755 "$sockdir" 2>/dev/null || true
cat <<MSG

gpubrokerd is starting on $socket (Ctrl-C stops it).
Talk to it from another terminal (any user may connect in this quick start):
    $top/build/client/ctl/gpubrokerctl status
    $top/build/examples/gpubroker-example-alloc
Run the test suite:
    $top/tools/test.sh

MSG
# Quick start only: the socket is open to every local user. A system
# service uses mode 0660 and the gpubroker group instead.
exec build/daemon/gpubrokerd --socket "$socket" --socket-mode 0666 "$@"
