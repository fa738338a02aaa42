#!/bin/sh
# Checks of the systemd units and snippets, without a running systemd:
#
#   test-units.sh verify SERVICE_IN SOCKET
#       systemd-analyze verify on the units; any line it prints fails the test.
#   test-units.sh security SERVICE_IN
#       systemd-analyze security --offline: overall exposure at most 2.0.
#   test-units.sh sysusers SYSUSERS TMPFILES_IN
#       systemd-sysusers and systemd-tmpfiles into a temporary root: the
#       gpubroker user and groups, /run/gpubroker and the configuration dir.
#   test-units.sh cuda SERVICE_IN NVIDIA_NODES
#       what the cuda backend needs of the service (issue 15): the NVIDIA
#       device nodes of every GPU made before the sandbox
#       (ExecStartPre=+-gpubroker-nvidia-nodes, run here against a stand-in
#       /proc/driver/nvidia/gpus of three GPUs and a stand-in nvidia-modprobe;
#       issue 25, item 9) and no PrivatePIDs= (legacy IPC does not cross PID
#       namespaces).
#   test-units.sh contents SERVICE_IN SOCKET
#       the settings the units must have (socket path and access, readiness,
#       restart, reload, watchdog, the sandbox around the NVIDIA devices),
#       read from the files themselves: needs no systemd at all.
#
# The service template gets the build tree's programs (GPB_DAEMON, GPB_CTL)
# in place of @sbindir@ and @bindir@, and a copy of gpubroker-nvidia-nodes
# (GPB_NVIDIA_NODES) in place of @libexecdir@'s, since verify wants the
# programs it names to exist.
# Exit 77 (skipped) when the systemd tool needed is not installed.
set -u
mode=$1
shift

skip() {
	echo "$*: skipped"
	exit 77
}

fail() {
	echo "FAIL: $*"
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpb-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The service unit with build-tree paths; the same variables as
# systemd/meson.build fills in at install time.
make_service() {
	: "${GPB_DAEMON:?run through meson test}" "${GPB_CTL:?run through meson test}"
	: "${GPB_NVIDIA_NODES:?run through meson test}"
	mkdir -p "$tmp/libexec"
	cp "$GPB_NVIDIA_NODES" "$tmp/libexec/gpubroker-nvidia-nodes" || exit 1
	sed -e "s|@sbindir@|$(dirname "$GPB_DAEMON")|g" \
		-e "s|@bindir@|$(dirname "$GPB_CTL")|g" \
		-e "s|@libexecdir@|$tmp/libexec|g" \
		-e "s|@sysconfdir@|/etc|g" \
		-e "s|@conffile@|/etc/gpubroker/gpubroker.conf|g" \
		-e "s|@conf_arg@||g" "$1" >"$tmp/gpubroker.service" || exit 1
	if grep -n '@[a-z_]*@' "$tmp/gpubroker.service"; then
		fail "a template variable is not filled in (update systemd/meson.build and this test)"
	fi
}

case $mode in
verify)
	command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze not found"
	make_service "$1"
	cp "$2" "$tmp/gpubroker.socket" || exit 1
	# Documentation=man: entries are checked against the pages built here
	# when there are some (and man is installed), else not at all.
	man=--man=no
	if [ -n "${GPB_MAN_DIR:-}" ] && [ -f "$GPB_MAN_DIR/gpubrokerd.8" ] &&
		command -v man >/dev/null 2>&1; then
		for page in "$GPB_MAN_DIR"/*.[0-9]; do
			section=${page##*.}
			mkdir -p "$tmp/man/man$section"
			cp "$page" "$tmp/man/man$section/"
		done
		man=--man=yes
		MANPATH=$tmp/man
		export MANPATH
	fi
	out=$(cd "$tmp" && systemd-analyze verify "$man" "$tmp/gpubroker.socket" "$tmp/gpubroker.service" 2>&1)
	rc=$?
	echo "systemd-analyze verify $man: exit $rc"
	if [ -n "$out" ]; then
		printf '%s\n' "$out"
		fail "systemd-analyze verify printed the warnings above"
	fi
	[ "$rc" -eq 0 ] || fail "systemd-analyze verify failed"
	echo "units verified"
	;;
security)
	command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze not found"
	systemd-analyze --help 2>/dev/null | grep -q -- '--offline' ||
		skip "systemd-analyze has no --offline (systemd older than 250)"
	make_service "$1"
	# --threshold is in tenths: 20 is an exposure of 2.0.
	out=$(cd "$tmp" && systemd-analyze security --offline=true --threshold=20 \
		"$tmp/gpubroker.service" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	level=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
	[ -n "$level" ] || fail "no overall exposure level in the output"
	awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' ||
		fail "exposure $level is above 2.0: harden gpubroker.service"
	[ "$rc" -eq 0 ] || fail "systemd-analyze security exited with $rc"
	echo "exposure $level (at most 2.0)"
	;;
sysusers)
	command -v systemd-sysusers >/dev/null 2>&1 || skip "systemd-sysusers not found"
	root=$tmp/root
	mkdir -p "$root/etc"
	systemd-sysusers --root="$root" - <"$1" || fail "systemd-sysusers failed"
	grep -q '^gpubroker:x:[0-9]*:$' "$root/etc/group" || fail "no gpubroker group"
	grep -q '^gpubroker-admin:x:[0-9]*:$' "$root/etc/group" || fail "no gpubroker-admin group"
	gid=$(sed -n 's/^gpubroker:x:\([0-9]*\):$/\1/p' "$root/etc/group")
	line=$(grep '^gpubroker:' "$root/etc/passwd") || fail "no gpubroker user"
	echo "user: $line"
	case $line in
	gpubroker:x:*:"$gid":*:*:*nologin) ;;
	*) fail "the gpubroker user should have the gpubroker group ($gid) and no login shell" ;;
	esac
	command -v systemd-tmpfiles >/dev/null 2>&1 || skip "systemd-tmpfiles not found"
	if [ "$(id -u)" != 0 ]; then
		echo "not root: systemd-tmpfiles (which sets owners) not checked"
		exit 0
	fi
	sed -e "s|@sysconfdir@|/etc|g" "$2" >"$tmp/tmpfiles.conf"
	if grep -n '@[a-z_]*@' "$tmp/tmpfiles.conf"; then
		fail "a template variable is not filled in"
	fi
	systemd-tmpfiles --root="$root" --create "$tmp/tmpfiles.conf" || fail "systemd-tmpfiles failed"
	for d in run/gpubroker etc/gpubroker; do
		[ -d "$root/$d" ] || fail "/$d not created"
		perm=$(stat -c '%a %U' "$root/$d")
		[ "$perm" = "755 root" ] || fail "/$d is '$perm', expected '755 root'"
	done
	echo "users, groups and directories created"
	;;
cuda)
	service=$1 nodes=$2
	pre=$(sed -n 's/^[[:space:]]*ExecStartPre=//p' "$service")
	printf '%s\n' "$pre" | grep -qx '+-@libexecdir@/gpubroker-nvidia-nodes' ||
		fail "gpubroker.service: no 'ExecStartPre=+-@libexecdir@/gpubroker-nvidia-nodes': the" \
			"sandboxed daemon cannot run the setuid nvidia-modprobe that makes missing" \
			"NVIDIA device nodes, and every GPU's node is needed (not /dev/nvidia0 alone)"
	# The helper against three GPUs of minors 0, 1 and 3 (the driver numbers
	# them as it finds them; a gap is possible) and an nvidia-modprobe that
	# records its arguments: every node, nvidia-uvm's with the first.
	mkdir -p "$tmp/bin"
	for m in 0 1 3; do
		mkdir -p "$tmp/gpus/0000:0$m:00.0"
		printf 'Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nDevice Minor: \t %s\n' "$m" \
			>"$tmp/gpus/0000:0$m:00.0/information"
	done
	printf '#!/bin/sh\necho "$*" >>"%s"\n' "$tmp/calls" >"$tmp/bin/nvidia-modprobe"
	chmod +x "$tmp/bin/nvidia-modprobe"
	sh "$nodes" "$tmp/gpus" "$tmp/bin/nvidia-modprobe" || fail "gpubroker-nvidia-nodes exited $?"
	calls=$(tr '\n' ';' <"$tmp/calls")
	[ "$calls" = "-u -c=0;-c=1;-c=3;" ] ||
		fail "gpubroker-nvidia-nodes ran nvidia-modprobe as '$calls', expected '-u -c=0;-c=1;-c=3;'"
	echo "three GPUs: nvidia-modprobe $calls"
	# No GPU listed (the module not loaded yet): node 0 and nvidia-uvm, as before.
	rm -f "$tmp/calls"
	sh "$nodes" "$tmp/none" "$tmp/bin/nvidia-modprobe" || fail "gpubroker-nvidia-nodes exited $?"
	[ "$(cat "$tmp/calls")" = "-u -c=0" ] || fail "with no GPU listed: '$(cat "$tmp/calls")'"
	# No nvidia-modprobe: nothing to do, and the unit starts anyway.
	out=$(sh "$nodes" "$tmp/gpus" "$tmp/bin/none") || fail "without nvidia-modprobe it exited $?"
	echo "without nvidia-modprobe: $out"
	if grep -q '^[[:space:]]*PrivatePIDs=' "$service"; then
		fail "gpubroker.service: PrivatePIDs= keeps legacy CUDA IPC handles from opening" \
			"in any client"
	fi
	echo "every GPU's device node made before the sandbox; no PrivatePIDs="
	;;
contents)
	service=$1 socket=$2
	# The value systemd uses for KEY in FILE: the last assignment wins (for
	# list settings an empty assignment resets the list, so the last one
	# is also the one that must not be empty where something is required).
	last() {
		sed -n "s/^[[:space:]]*$1=//p" "$2" | tail -n 1 | sed 's/[[:space:]]*$//'
	}
	# Every assignment of KEY in FILE, one per line.
	all() {
		sed -n "s/^[[:space:]]*$1=//p" "$2" | sed 's/[[:space:]]*$//'
	}
	expect() { # FILE KEY VALUE
		v=$(last "$2" "$1")
		[ "$v" = "$3" ] || fail "$(basename "$1"): $2= is '$v', expected '$3'"
	}
	yes_() { # FILE KEY: a boolean that is on
		case $(last "$2" "$1") in
		yes | true | on | 1) ;;
		*) fail "$(basename "$1"): $2= must be yes" ;;
		esac
	}

	# The socket: where clients find it, and who may connect.
	listen=/run/gpubroker/gpubroker.sock
	expect "$socket" ListenStream "$listen"
	expect "$socket" SocketMode 0660
	expect "$socket" SocketGroup gpubroker

	# Readiness, restart and reload.
	expect "$service" Type notify
	expect "$service" Restart on-failure
	case $(last ExecReload "$service") in
	*/gpubrokerctl\ reload | */gpubrokerctl\ reload\ *) ;;
	*) fail "gpubroker.service: ExecReload= must run gpubrokerctl reload" ;;
	esac
	# The daemon pings from its event loop when WatchdogSec= is set: a
	# positive interval, with the notifications accepted from the daemon.
	wd=$(last WatchdogSec "$service")
	case $wd in
	'' | 0 | 0s | infinity) fail "gpubroker.service: WatchdogSec= is not set ('$wd')" ;;
	[1-9]*) ;;
	*) fail "gpubroker.service: WatchdogSec= '$wd' is not a time" ;;
	esac
	case $(last NotifyAccess "$service") in
	'' | main | exec | all) ;;
	*) fail "gpubroker.service: NotifyAccess= keeps the daemon's READY=1 and WATCHDOG=1 out" ;;
	esac

	# The NVIDIA device nodes: the host's /dev, and each device allowed by
	# its device group and by its node path.
	case $(last PrivateDevices "$service") in
	'' | no | false | off | 0) ;;
	*) fail "gpubroker.service: PrivateDevices= would hide the GPUs" ;;
	esac
	allowed=$(all DeviceAllow "$service")
	for dev in char-nvidiactl /dev/nvidiactl char-nvidia-uvm /dev/nvidia-uvm \
		char-nvidia /dev/nvidia0 char-nvidia-frontend; do
		printf '%s\n' "$allowed" | grep -q "^$dev rw\$" ||
			fail "gpubroker.service: no 'DeviceAllow=$dev rw'"
	done
	expect "$service" DevicePolicy closed

	# The sandbox.
	expect "$service" ProtectSystem strict
	yes_ "$service" NoNewPrivileges
	expect "$service" RestrictAddressFamilies AF_UNIX
	yes_ "$service" PrivateNetwork
	grep -q '^CapabilityBoundingSet=' "$service" ||
		fail "gpubroker.service: no CapabilityBoundingSet="
	expect "$service" CapabilityBoundingSet ""
	all SystemCallFilter "$service" | grep -q -v '^~' ||
		fail "gpubroker.service: no SystemCallFilter= allow list"

	# systemd removes a service's RuntimeDirectory= when the service stops:
	# it must not be the socket's directory unless it is preserved.
	sockdir=${listen%/*}
	for d in $(all RuntimeDirectory "$service"); do
		if [ "/run/${d#/}" = "$sockdir" ]; then
			case $(last RuntimeDirectoryPreserve "$service") in
			yes | true | on | 1) ;;
			*) fail "gpubroker.service: RuntimeDirectory=$d removes $sockdir, the socket's directory" ;;
			esac
		fi
	done
	echo "unit contents as required"
	;;
*)
	echo "usage: $0 verify|security|sysusers|contents ..." >&2
	exit 2
	;;
esac
