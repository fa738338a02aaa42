#!/usr/bin/env bash
# The first thing to run on a GPU: everything docs/cuda.md lists to check on
# hardware, in one call of at most 8 minutes, from a bundle made by
# tools/gpu-bundle.sh, with one results file at the end.
#
#   usage: bash tools/gpu-check.sh [--dry] [--out DIR] [--bundle DIR]
#                                  [--deadline SECONDS] [--no-repo-results]
#                                  [--only PATTERNS]
#          bash tools/gpu-check.sh --list        the checks' names, in order
#
# Run from the repository root (the sources of tests/python and python/ are
# read from the working tree; the programs from the bundle, default .gpu).
# On the device tool: carry the bundle, OUT is set there:
#     bash tools/gpu-check.sh            (command, in the repository root)
#
# What runs (in this order, so that what matters most runs first):
#   probe              tests/gpu/probe.py: the driver's answers (cuda-bindings)
#   vmm-X, ipc-X       every gpu program (build/tests/gpu/test-gpu-X) on both
#                      cuda transports
#   bench-vmm/-ipc     bench-gpu on both transports (its tables go in the file)
#   py-vmm-X, py-ipc-X the Python tests of tests/python/gpu (numba, cupy,
#                      torch, intercept: gpubroker-run), with the bundle's numpy first on PYTHONPATH
#   xuid-vmm-X, xuid-ipc-X   the uid axis: every program with the daemon as
#                      uid 65533 (GPB_DAEMON_UID), the test as root
#   py-xuid-vmm-X, py-xuid-ipc-X   the Python tests on the uid axis
#   mps-*              the daemon and its clients as clients of an MPS control
#                      daemon of this script's own (its pipe directory under a
#                      temporary folder; quit at the end; the GPU's compute
#                      mode and other settings are never changed)
#   unit-vmm, unit-ipc the daemon under the sandbox of systemd/gpubroker.service
#                      (systemd-run with the unit's properties) and a client
#                      of another uid mapping its memory; skipped where PID 1
#                      is not systemd
#
# It keeps going after a failure, gives every check a timeout, starts no new
# check after the deadline (default 400 s; no check runs past deadline + 50 s),
# and after every check rewrites the results file (device, driver, CUDA
# version, every check's PASS/FAIL/SKIP/TIMEOUT/NOTRUN with its first error
# line and seconds, bench-gpu's tables, the probe's output, what the
# reporting programs printed) and a tarball of every log, both in DIR
# ($OUT where set, else ./gpu-check-out): a run cut short still leaves them.
# The results file is also written under bench/results/ in the repository
# (unless --no-repo-results).
#
# --only PATTERNS runs the checks whose names match one of the shell
# patterns, comma-separated (say 'py-*' or '*-lease,*-torch' to run again
# what a first run found failing, in the time left).
#
# --dry runs the same against the fake driver (tests/fakecuda, as the Meson
# suite cuda-fake does): CI runs it (tests/gpu/test-gpu-check.sh) so that the
# script, the bundle and the results file are known to work before a GPU
# sees them. Its results file says it is the fake.
#
# Exit status: 0 when every check ran and none failed or timed out, 1
# otherwise, 2 for a usage error or a missing bundle.
set -u

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
top=$(cd "$(dirname "$self")/.." && pwd)

dry=0 list=0 repo_results=1 deadline=${GPB_CHECK_DEADLINE:-400} only='*'
bundle=.gpu out=${OUT:-}
python=${GPB_CHECK_PYTHON:-python3}
daemon_uid=65533
step=

while [ $# -gt 0 ]; do
	case $1 in
	--dry) dry=1 ;;
	--list) list=1 ;;
	--no-repo-results) repo_results=0 ;;
	--out) out=$2; shift ;;
	--bundle) bundle=$2; shift ;;
	--deadline) deadline=$2; shift ;;
	--only) only=$2; shift ;;
	--step) step=$2; shift; shift; break ;; # internal: one step run by timeout
	-h | --help) sed -n '2,/^set -u/p' "$self" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "gpu-check: unknown argument '$1' (--help)" >&2; exit 2 ;;
	esac
	shift
done

cd "$top" || exit 2
case $bundle in /*) ;; *) bundle=$top/$bundle ;; esac
B=$bundle
BUILD=$B/build
progs="vmm info alloc kill handles ctx order share label host invalidate evict async small pools
	capacity legacy-ipc modes mig driver torch vmm-uid vmm-start fork fds errors lease capture"
# The programs about the daemon's per-allocation semantics: run with
# GPUBROKER_LEASE=0, as tests/gpu/meson.build's per_alloc (which says why).
per_alloc="alloc share vmm-uid"
lease_env() { # PROGRAM: the GPUBROKER_LEASE setting it runs with
	case " $per_alloc " in
	*" $1 "*) echo GPUBROKER_LEASE=0 ;;
	*) echo GPUBROKER_LEASE=1 ;;
	esac
}
pytests="numba cupy torch intercept"

wanted() { # NAME: whether --only's patterns (comma-separated) match it
	local p pats
	IFS=, read -r -a pats <<<"$only" # no pathname expansion of the patterns
	for p in "${pats[@]}"; do
		# shellcheck disable=SC2254 # the pattern is meant to match
		case $1 in $p) return 0 ;; esac
	done
	return 1
}

# ---- steps run by timeout (a shell function cannot be) ---------------------

# A skipped check that still shows in the results with its reason.
step_skip() {
	echo "SKIP: $*"
	exit 77
}

# The [Service] settings of systemd/gpubroker.service.in that make the
# sandbox, as systemd-run -p arguments, one a line. Left out: how the
# service starts and restarts (this run starts the daemon itself), its user
# (given below) and ExecStartPre (run by hand before).
unit_properties() {
	sed -n '/^\[Service\]/,/^\[/p' "$top/systemd/gpubroker.service.in" |
		grep -E '^[A-Za-z]+=' |
		grep -vE '^(Type|NotifyAccess|ExecStart|ExecStartPre|ExecReload|Restart|RestartSec|WatchdogSec|TimeoutStopSec|User|Group|SupplementaryGroups)='
}

# The daemon under the unit's sandbox (transport $1), a client of another
# uid allocating, writing and reading back through it, then its log.
step_unit() {
	local tr=$1 comm unit dir sock rc=0
	comm=$(cat /proc/1/comm 2>/dev/null || echo unknown)
	if [ "$dry" = 1 ] || [ ! -d /run/systemd/system ] || ! command -v systemd-run >/dev/null; then
		echo "the systemd-run command this check runs where PID 1 is systemd:"
		echo "  systemd-run --unit=gpb-check-$tr -p Type=notify -p User=<gpubroker or $daemon_uid> \\"
		unit_properties | sed 's/^/    -p /; s/$/ \\/'
		echo "    <copy of gpubrokerd> --backend cuda --cuda-transport $tr ..."
		step_skip "no systemd (PID 1 is $comm)$([ "$dry" = 1 ] && echo '; dry run')"
	fi
	# The unit's ExecStartPre, as the service would run it.
	sh "$top/systemd/gpubroker-nvidia-nodes.sh"
	unit=gpb-check-$tr-$$
	# ProtectHome= hides /root and /home, where the repository may be: the
	# daemon and its libraries are copied where the sandbox sees them.
	dir=/var/lib/$unit
	rm -rf "$dir" && mkdir -p "$dir" && cp "$BUILD/daemon/gpubrokerd" "$B"/lib/* "$dir/" &&
		chmod -R a+rX "$dir" || return 1
	local user=$daemon_uid group=$daemon_uid
	getent passwd gpubroker >/dev/null && user=gpubroker group=gpubroker
	local props=(-p Type=notify -p NotifyAccess=main -p "User=$user" -p "Group=$group"
		-p "RuntimeDirectory=$unit" -p RuntimeDirectoryMode=0755)
	getent group video >/dev/null && props+=(-p SupplementaryGroups=video)
	while IFS= read -r p; do props+=(-p "$p"); done < <(unit_properties)
	sock=/run/$unit/gpubroker.sock
	echo "systemd-run --unit=$unit ${props[*]} ..."
	systemd-run --quiet --unit="$unit" "${props[@]}" --setenv=LD_LIBRARY_PATH="$dir" \
		"$dir/gpubrokerd" --socket "$sock" --socket-mode 0666 --backend cuda \
		--cuda-transport "$tr" --log-level debug || rc=1
	if [ "$rc" = 0 ]; then
		GPUBROKER_SOCKET=$sock "$BUILD/client/ctl/gpubrokerctl" devices || rc=1
		# A client of uid 65534 maps, writes and reads back a slab.
		local client="import gpubroker
with gpubroker.Client(name='gpu-check-unit') as c:
    inst = c.register('unit', device=0)
    with c.alloc(inst, 1 << 20) as a:
        a.write(b'under the unit')
        assert a.read(14) == b'under the unit', a.read(14)
print('a client of uid', __import__('os').getuid(), 'mapped, wrote and read back')"
		for who in 0 65534; do
			setpriv --reuid "$who" --regid "$who" --clear-groups env \
				PYTHONPATH="$top/python" GPUBROKER_SOCKET="$sock" \
				GPUBROKER_LIBRARY="$B/lib/libgpubroker.so.0" LD_LIBRARY_PATH="$B/lib" \
				"$python" -c "$client" || rc=1
		done
	fi
	echo "---- the daemon's journal"
	journalctl -u "$unit" --no-pager 2>&1 | tail -n 60
	systemctl stop "$unit" 2>/dev/null
	systemctl reset-failed "$unit" 2>/dev/null
	rm -rf "$dir"
	return "$rc"
}

if [ -n "$step" ]; then
	case $step in
	skip) step_skip "$@" ;;
	unit) step_unit "$@"; exit $? ;;
	*) echo "gpu-check: no step '$step'" >&2; exit 2 ;;
	esac
fi

# ---- the plan ---------------------------------------------------------------
# Every check, in order. In --list mode check() prints the name only, so the
# list and the run cannot differ.

plan() {
	local t tr pre n
	check probe 60 "$python" tests/gpu/probe.py
	for tr in vmm ipc; do
		for t in $progs; do
			check "$tr-$t" 60 env "${fake_env[@]}" GPB_CUDA_TRANSPORT=$tr "$(lease_env "$t")" \
				"$BUILD/tests/gpu/test-gpu-$t"
		done
	done
	for tr in vmm ipc; do
		check "bench-$tr" 120 env "${fake_env[@]}" "${bench_env[@]}" GPB_CUDA_TRANSPORT=$tr \
			"$BUILD/tests/gpu/bench-gpu" "$L/bench-$tr.md"
	done
	for tr in vmm ipc; do
		for n in $pytests; do pytest_check "py-$tr-$n" "$tr" "" "$n"; done
	done
	for tr in vmm ipc; do
		pre=()
		# The fake's default share policy refuses legacy IPC across uids; as
		# the suite does (cuda-fake-ipc-xuid-X), the rest runs under =all.
		[ "$dry" = 1 ] && [ "$tr" = ipc ] && pre=(FAKECUDA_IPC_POLICY=all)
		for t in $progs; do
			check "xuid-$tr-$t" 60 env "${fake_env[@]}" "${pre[@]}" GPB_CUDA_TRANSPORT=$tr \
				GPB_DAEMON_UID=$daemon_uid "$(lease_env "$t")" "$BUILD/tests/gpu/test-gpu-$t"
		done
	done
	for tr in vmm ipc; do
		for n in $pytests; do pytest_check "py-xuid-$tr-$n" "$tr" "$daemon_uid" "$n"; done
	done
	mps_checks
	unit_args=(--bundle "$B")
	[ "$dry" = 1 ] && unit_args+=(--dry)
	for tr in vmm ipc; do
		check "unit-$tr" 90 bash "$self" "${unit_args[@]}" --step unit "$tr"
	done
}

pytest_check() { # NAME TRANSPORT DAEMON_UID TEST
	check "$1" 150 env "${fake_env[@]}" PYTHONPATH="$site${site:+:}$top/python" \
		PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 GPB_PYTEST_SKIP_EXIT=1 \
		GPB_CUDA_TRANSPORT="$2" GPB_DAEMON_UID="$3" \
		GPUBROKERD="$BUILD/daemon/gpubrokerd" GPUBROKERCTL="$BUILD/client/ctl/gpubrokerctl" \
		GPUBROKER_LIBRARY="$B/lib/libgpubroker.so.0" \
		"$python" -m pytest -p no:cacheprovider -q -rs --rootdir tests/python \
		"tests/python/gpu/test_$4.py"
}

# MPS: a control daemon of this run's own, found by its clients through
# CUDA_MPS_PIPE_DIRECTORY; quit when these checks end (and at exit).
mps_names="mps-vmm-vmm mps-vmm-alloc mps-vmm-kill mps-ipc-alloc mps-probe"
mps_checks() {
	local reason=""
	if [ "$list" = 1 ]; then
		for n in mps-start $mps_names; do check "$n"; done
		return
	fi
	if [ "$dry" = 1 ]; then
		reason="dry run: the fake driver has no MPS"
	elif ! command -v nvidia-cuda-mps-control >/dev/null; then
		reason="no nvidia-cuda-mps-control on this machine"
	fi
	if [ -n "$reason" ]; then
		for n in mps-start $mps_names; do check "$n" 10 bash "$self" --step skip "$reason"; done
		return
	fi
	# No MPS daemon for a run (--only) that wants none of its checks.
	local want=0
	for n in mps-start $mps_names; do wanted "$n" && want=1; done
	[ "$want" = 1 ] || return 0
	export CUDA_MPS_PIPE_DIRECTORY=$T/mps/pipe CUDA_MPS_LOG_DIRECTORY=$T/mps/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	mps_started=1
	# shellcheck disable=SC2016 # expanded by that bash
	check mps-start 30 bash -c 'nvidia-cuda-mps-control -d || exit 1
		for _ in $(seq 100); do
			# A Unix socket with CUDA 13.0 (its log: "using socket"), a FIFO before.
			c=$CUDA_MPS_PIPE_DIRECTORY/control
			{ [ -S "$c" ] || [ -p "$c" ]; } && exit 0
			sleep 0.1
		done
		echo "FAIL: no control socket or pipe in $CUDA_MPS_PIPE_DIRECTORY after 10 s"; exit 1'
	if [ "${verdict[mps-start]}" = PASS ]; then
		for t in vmm alloc kill; do
			check "mps-vmm-$t" 60 env GPB_CUDA_TRANSPORT=vmm "$(lease_env "$t")" \
				"$BUILD/tests/gpu/test-gpu-$t"
		done
		check mps-ipc-alloc 60 env GPB_CUDA_TRANSPORT=ipc "$(lease_env alloc)" \
			"$BUILD/tests/gpu/test-gpu-alloc"
		check mps-probe 60 "$python" tests/gpu/probe.py
	else
		for n in $mps_names; do check "$n" 10 bash "$self" --step skip "the MPS control daemon did not start"; done
	fi
	mps_quit
}
mps_started=0
mps_quit() {
	[ "$mps_started" = 1 ] || return 0
	mps_started=0
	echo quit | timeout 20 nvidia-cuda-mps-control >"$L/mps-quit.log" 2>&1
	cp -r "$CUDA_MPS_LOG_DIRECTORY" "$L/mps-log" 2>/dev/null
	unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

if [ "$list" = 1 ]; then
	check() { if wanted "$1"; then echo "$1"; fi; }
	fake_env=() bench_env=() site="" L=/nonexistent
	plan
	exit 0
fi

# ---- setting up -------------------------------------------------------------

if [ ! -x "$BUILD/daemon/gpubrokerd" ] || [ ! -e "$B/lib/libgpubroker.so.0" ]; then
	echo "gpu-check: no bundle in $B: run tools/gpu-bundle.sh BUILD_DIR first" >&2
	exit 2
fi
out=${out:-$top/gpu-check-out}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
chmod 755 "$T"
L=$T/logs
mkdir -p "$L"
trap 'mps_quit; rm -rf "$T"' EXIT
start=$(date +%s)
hard=$((deadline + 50))

export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPB_DAEMON=$BUILD/daemon/gpubrokerd
fake_env=() bench_env=()
if [ "$dry" = 1 ]; then
	# As tests/gpu/meson.build's cuda-fake environments.
	fake_env=(GPB_FAKE_CUDA=1 "LD_LIBRARY_PATH=$BUILD/tests/fakecuda:$LD_LIBRARY_PATH")
	bench_env=(GPB_BENCH_QUICK=1)
	# test-gpu-fds maps 128 slabs rather than 1,280 (the suite's
	# cuda-fake-fds maps them all): the dry run checks this script.
	export GPB_BENCH_QUICK=1
	export LD_LIBRARY_PATH="$BUILD/tests/fakecuda:$LD_LIBRARY_PATH"
fi

# The uid axis: the daemon as uid 65533 reads the bundle and the sources.
# On the GPU machine (a copy of the repository, given back after the call)
# every folder above them is opened to others; never in a dry run, which
# runs in someone's checkout (the C programs stage what they need).
if [ "$dry" = 0 ] && [ "$(id -u)" = 0 ]; then
	for d in "$B" "$top"; do
		while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null; d=$(dirname "$d"); done
	done
	chmod -R o+rX "$B" "$top/python" "$top/tests" 2>/dev/null
fi

# numpy from the bundle (numba-cuda 0.30.4 compiles no kernel with numpy 2.5).
site=""
numpy_note="the machine's own (no wheel in the bundle)"
if ls "$B"/whl/*.whl >/dev/null 2>&1; then
	if "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
		--target "$T/site" "$B"/whl/*.whl >"$L/wheels.log" 2>&1; then
		site=$T/site
		chmod -R o+rX "$site" 2>/dev/null
		numpy_note="from the bundle, first on PYTHONPATH: $(for w in "$B"/whl/*.whl; do printf '%s ' "${w##*/}"; done)"
	else
		numpy_note="the machine's own: the bundle's wheel did not install ($(tail -n 1 "$L/wheels.log"))"
	fi
fi

# ---- facts about the machine ------------------------------------------------

# The driver's version and device 0, asked of libcuda.so.1 (the fake in a
# dry run) through ctypes: cuDriverGetVersion needs no cuInit.
driver_facts() {
	"$python" - <<'EOF' 2>&1
import ctypes
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("libcuda.so.1 does not load:", e)
    raise SystemExit
v = ctypes.c_int()
cu.cuDriverGetVersion(ctypes.byref(v))
print("CUDA version (driver API): %d.%d (%d)" % (v.value // 1000, v.value % 1000 // 10, v.value))
n, dev, total = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
name = ctypes.create_string_buffer(256)
if cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0:
    print("devices:", n.value)
    for i in range(n.value):
        cu.cuDeviceGet(ctypes.byref(dev), i)
        cu.cuDeviceGetName(name, 256, dev)
        cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
        print("device %d: %s, %d MiB" % (i, name.value.decode(), total.value >> 20))
else:
    print("cuInit or cuDeviceGetCount failed")
EOF
}

facts=$T/facts
{
	if [ "$dry" = 1 ]; then
		echo "driver: the FAKE driver, tests/fakecuda (dry run: not a GPU)"
	elif command -v nvidia-smi >/dev/null; then
		nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_mode,persistence_mode,mig.mode.current \
			--format=csv 2>&1 | sed 's/^/nvidia-smi: /'
		nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1 | sed 's/^/nvidia-smi: /'
	else
		echo "nvidia-smi: not found"
	fi
	driver_facts
	echo "kernel: $(uname -srm); $(nproc) CPUs; $(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo); PID 1: $(cat /proc/1/comm 2>/dev/null)"
	echo "user: $(id -un 2>/dev/null || id -u) (uid $(id -u))"
	echo "bundle: $(tr '\n' ';' <"$B/BUNDLE" 2>/dev/null | sed 's/;$//; s/;/; /g')"
	echo "python3: $("$python" -c 'import sys; print(sys.version.split()[0])' 2>&1) $("$python" - <<'EOF' 2>&1
import importlib.metadata as m
out = []
for p in ("numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x", "torch", "numpy", "pytest", "cuda-bindings"):
    try:
        out.append("%s %s" % (p, m.version(p)))
    except m.PackageNotFoundError:
        pass
print("with " + ", ".join(out) if out else "(none of numba, cupy, torch, numpy, pytest, cuda-bindings)")
EOF
)"
	echo "numpy for the Python tests: $numpy_note"
} >"$facts" 2>&1
cp "$facts" "$L/facts.txt"

# The results file's name: the device's, or "dry".
if [ "$dry" = 1 ]; then
	slug=dry
else
	slug=$(sed -n 's/^device 0: \([^,]*\),.*/\1/p' "$facts" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' | sed 's/-$//')
	slug=${slug:-nodevice}
fi
base=$(date -u +%F)-gpu-check-$slug
results=$out/$base.md
tarball=$out/$base-logs.tar.gz

# ---- running a check --------------------------------------------------------

names=()
declare -A verdict secs why

# The line that says why a check did not pass: its first error, else its
# first skip reason, else its last line.
first_error() { # LOG VERDICT
	local line=""
	case $2 in
	SKIP) line=$(grep -m 1 -E 'SKIP|[Ss]kipped' "$1") ;;
	*)
		# pytest's summary line, then a C program's CHECK, then anything.
		line=$(grep -m 1 -E '^(FAILED|ERROR) ' "$1") ||
			line=$(grep -m 1 -E 'FAIL:' "$1") ||
			line=$(grep -m 1 -E 'FAIL|Error|ERROR|error:|Traceback|[Ff]ailed' "$1")
		;;
	esac
	[ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)
	printf '%s' "$line" | cut -c 1-300
}

check() { # NAME TIMEOUT COMMAND...
	local name=$1 to=$2 now t0 rc v
	shift 2
	wanted "$name" || return 0
	names+=("$name")
	now=$(($(date +%s) - start))
	if [ "$now" -ge "$deadline" ] || [ $((hard - now)) -lt 10 ]; then
		verdict[$name]=NOTRUN secs[$name]=0 why[$name]="deadline ($deadline s) reached at $now s"
		echo "NOTRUN $name"
		render
		return
	fi
	[ $((hard - now)) -lt "$to" ] && to=$((hard - now))
	t0=$(date +%s.%N)
	timeout -k 5 "$to" "$@" >"$L/$name.log" 2>&1 </dev/null
	rc=$?
	case $rc in
	0) v=PASS ;;
	77) v=SKIP ;;
	124 | 137) v=TIMEOUT ;;
	*) v=FAIL ;;
	esac
	verdict[$name]=$v
	secs[$name]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	why[$name]=""
	if [ "$v" = TIMEOUT ]; then
		why[$name]="killed after $to s; last line: $(first_error "$L/$name.log" PASS)"
	elif [ "$v" != PASS ]; then
		why[$name]="rc $rc: $(first_error "$L/$name.log" "$v")"
	fi
	echo "$v $name ${secs[$name]}s${why[$name]:+ | ${why[$name]}}"
	render
}

# ---- the results file -------------------------------------------------------

# A log's lines for a code block (never closing it), at most N.
excerpt() { # LOG N
	# shellcheck disable=SC2016 # backquotes, not an expansion
	[ -f "$1" ] && sed 's/```/`` `/g' "$1" | head -n "$2"
}

render() {
	local n c v tr tmp=$results.tmp
	local -A count=()
	for n in "${names[@]}"; do
		v=${verdict[$n]}
		count[$v]=$((${count[$v]:-0} + 1))
	done
	{
		if [ "$dry" = 1 ]; then
			echo "# gpu-check, DRY RUN against the fake driver: $(date -u +%F)"
			echo
			echo "**This is the fake.** A dry run of tools/gpu-check.sh against tests/fakecuda"
			echo "(a libcuda.so.1 stand-in on host memory), as CI runs it: it shows that the"
			echo "bundle, the script and this file work. Its verdicts and figures say nothing"
			echo "about a GPU."
		else
			echo "# gpu-check: $(sed -n 's/^device 0: //p' "$facts" | head -n 1), $(date -u +%F)"
		fi
		echo
		echo "- command: \`bash tools/gpu-check.sh$([ "$dry" = 1 ] && echo ' --dry')$([ "$only" != '*' ] && echo " --only '$only'")\` (deadline $deadline s), started $(date -u -d "@$start" +%FT%TZ), $(($(date +%s) - start)) s so far"
		sed 's/^/- /' "$facts"
		echo
		echo "## Summary"
		echo
		printf '%s checks:' "${#names[@]}"
		for v in PASS FAIL TIMEOUT SKIP NOTRUN; do printf ' %s %s,' "${count[$v]:-0}" "$v"; done | sed 's/,$//'
		echo
		echo
		echo "## Checks"
		echo
		echo "| check | verdict | seconds | first error line |"
		echo "|---|---|---:|---|"
		for n in "${names[@]}"; do
			printf '| %s | %s | %s | %s |\n' "$n" "${verdict[$n]}" "${secs[$n]}" \
				"$(printf '%s' "${why[$n]}" | sed 's/|/\\|/g')"
		done
		for tr in vmm ipc; do
			echo
			echo "## bench-gpu, transport $tr"
			echo
			if [ -s "$L/bench-$tr.md" ]; then
				sed 's/^#/###/' "$L/bench-$tr.md"
			else
				echo "(no table: bench-$tr ${verdict[bench-$tr]:-has not run})"
			fi
		done
		echo
		echo "## The driver's answers (tests/gpu/probe.py)"
		echo
		echo '```'
		excerpt "$L/probe.log" 200 || echo "(probe has not run)"
		echo '```'
		echo
		echo "## What the reporting programs printed"
		echo
		echo "Lines of the programs that print what only hardware can say (first 25 of each)."
		for c in vmm-vmm vmm-capacity vmm-small vmm-pools vmm-handles vmm-ctx vmm-driver vmm-modes \
			vmm-mig ipc-small ipc-pools ipc-legacy-ipc xuid-ipc-legacy-ipc xuid-ipc-alloc \
			mps-probe unit-vmm unit-ipc; do
			[ -f "$L/$c.log" ] || continue
			echo
			echo "### $c (${verdict[$c]})"
			echo
			echo '```'
			excerpt "$L/$c.log" 25
			echo '```'
		done
		echo
		echo "Every log: $base-logs.tar.gz beside this file (in the output folder)."
	} >"$tmp" 2>/dev/null
	mv "$tmp" "$results"
	if [ "$repo_results" = 1 ]; then
		mkdir -p "$top/bench/results" && cp "$results" "$top/bench/results/$base.md"
	fi
	# The logs, re-made after every step: a call cut short still returns them.
	cp "$results" "$L/" 2>/dev/null
	tar -C "$T" -czf "$tarball.tmp" logs 2>/dev/null && mv "$tarball.tmp" "$tarball"
}

# ---- the run ----------------------------------------------------------------

echo "gpu-check: $(tr '\n' ';' <"$facts" | cut -c 1-400)"
echo "gpu-check: results in $results"
plan
mps_quit
render
bad=0
for n in "${names[@]}"; do
	case ${verdict[$n]} in FAIL | TIMEOUT | NOTRUN) bad=1 ;; esac
done
echo "gpu-check: $(grep -m 1 ' checks:' "$results") in $(($(date +%s) - start)) s; $results"
exit "$bad"
