#!/bin/sh
# Socket activation: systemd-socket-activate holds a listening socket as
# systemd does and starts gpubrokerd (LISTEN_FDS=1) on the first connection;
# the real gpubrokerctl must be served through it, by that process, and the
# socket file (systemd's, not the daemon's) must outlive the daemon. Then the
# same with a --socket that differs from the passed socket: the daemon warns
# and serves the passed one.
# Exit 77 (skipped) without systemd-socket-activate (Debian package systemd)
# or when the daemon is built without libsystemd.
set -u
: "${GPB_DAEMON:?run through meson test}" "${GPB_CTL:?run through meson test}"
if [ "${GPB_HAVE_SYSTEMD:-1}" = 0 ]; then
	echo "gpubrokerd is built without libsystemd (no socket activation): skipped"
	exit 77
fi
command -v systemd-socket-activate >/dev/null 2>&1 || {
	echo "systemd-socket-activate not found (Debian package systemd): skipped"
	exit 77
}
unset GPUBROKER_SOCKET NOTIFY_SOCKET LISTEN_FDS LISTEN_PID LISTEN_FDNAMES WATCHDOG_USEC

tmp=$(mktemp -d /tmp/gpb-activate.XXXXXX) || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
: >"$tmp/empty.conf"

fail() {
	echo "FAIL: $*"
	echo "--- daemon log ---"
	cat "$tmp/daemon.log"
	exit 1
}

# activate SOCKET DAEMON_SOCKET_FLAG: starts systemd-socket-activate on
# SOCKET, running gpubrokerd with --socket DAEMON_SOCKET_FLAG; sets $pid.
activate() {
	systemd-socket-activate -l "$1" "$GPB_DAEMON" --config "$tmp/empty.conf" \
		--socket "$2" --backend sim --sim-memory 64MiB --slab-size 2MiB \
		2>"$tmp/daemon.log" &
	pid=$!
	i=0
	while [ ! -S "$1" ]; do
		i=$((i + 1))
		[ $i -le 500 ] || fail "systemd-socket-activate did not create $1"
		kill -0 "$pid" 2>/dev/null || fail "systemd-socket-activate exited"
		sleep 0.02
	done
}

# stop: SIGTERM, exit status 0.
stop() {
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
	pid=
	[ "$rc" -eq 0 ] || fail "gpubrokerd exited with $rc after SIGTERM"
}

sock=$tmp/gpubroker.sock
activate "$sock" "$sock"
# The daemon starts on this first connection.
out=$("$GPB_CTL" --socket "$sock" status 2>&1) || fail "gpubrokerctl status: $out"
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q '^backend  *sim$' || fail "status does not show the sim backend"
json=$("$GPB_CTL" --socket "$sock" --output json status 2>&1) || fail "status json: $json"
printf '%s\n' "$json" | grep -q "\"pid\":${pid}[,}]" ||
	fail "status was not answered by the activated process $pid: $json"
grep -q 'listening on the socket from systemd' "$tmp/daemon.log" ||
	fail "the daemon did not say it uses the socket from systemd"
stop
[ -S "$sock" ] || fail "the daemon removed a socket it did not create"
echo "activated on $sock: served by pid from LISTEN_FDS, socket left in place"

# A configured path that is not the passed socket: warn, serve the passed one.
rm -f "$sock"
activate "$sock" "$tmp/elsewhere.sock"
out=$("$GPB_CTL" --socket "$sock" status 2>&1) || fail "gpubrokerctl status (other path): $out"
grep -q "passed a listening socket not at $tmp/elsewhere.sock" "$tmp/daemon.log" ||
	fail "no warning about the socket path mismatch"
[ ! -e "$tmp/elsewhere.sock" ] || fail "the daemon bound its own socket as well"
stop
echo "a passed socket at another path is used, with a warning"
