#!/bin/sh
# The slurm suite: a real single-node Slurm (slurmctld, slurmd, its own
# munged) in a temporary folder, the SPANK plugin from this build in its
# plugstack, a sim gpubrokerd on a temporary socket, and jobs that use them:
#
#   partition    srun --gpu-mem=1G: the client sees a 1 GiB device, can take
#                1 GiB and not a chunk more, and its registrations follow the
#                policy inside the partition (active mode: 1/4 and the rest)
#   python       the Python package in a job: a 512 MiB device, refused past it
#   concurrent   two jobs (gpumem GRES, one also --gpu-mem) hold memory at
#                once in partitions of their own, which `gpubrokerctl
#                partitions` shows with their size and use; a third whose
#                gpumem would overcommit the node stays PENDING (Resources)
#                with no partition, and runs (and passes) once they are gone
#   scancel      the two are ended by scancel (one by SIGKILL while it
#                allocates and frees in a loop): no partition, no memory left
#   sbatch       a batch job and the srun steps inside it share one partition;
#                salloc --gpu-mem passes the size on to its srun step
#   gpus         two jobs with a GPU GRES each (gpu:1, character devices
#                made with mknod) get partitions on their own GPU only
#   planted      with one GPU busy, a step Slurm puts on the other with the
#                busy one planted as SLURM_JOB_GPUS (srun copies the user's
#                environment), with and without the plugin's slurmctld
#                lookup (gres=), and a batch job with it planted as
#                SLURM_STEP_GPUS, get their partitions on their own GPU
#   user         a job submitted as nobody: its partition is nobody's, and
#                its client (as nobody) is in it
#   restarts     slurmd restarted under a job: its end still destroys the
#                partition; the broker restarted: no partition, no token file
#   refusals     a malformed --gpu-mem, one over the job's gpumem GRES, and
#                one over the device fail the job, saying why
#   leftover     a partition named as the job's but without the plugin's
#                token file (an earlier job with the same id) is replaced
#   broker-down  the broker stopped: a job with --gpu-mem fails to start with
#                a message naming the socket, a job without runs; with
#                fail_open in plugstack.conf the job runs without a partition
#   epilog       gpubroker-slurm-epilog destroys a partition left behind
#   leaks        at the end: no partition, nothing used, no token file
#
# Needs root (it runs Slurm's daemons): exit 77 otherwise. Slurm, munge and
# libslurm-dev come from tools/deps.sh. Under AddressSanitizer it skips too:
# slurmstepd (not instrumented) cannot load an instrumented plugin.
# Everything it started is stopped on every exit (trap).
#
# Environment (set by meson): GPB_DAEMON GPB_CTL GPB_SPANK GPB_SLURM_CLIENT
# GPB_SLURM_EPILOG [GPB_PYTHON GPB_PYTHONPATH GPB_SLURM_PYCLIENT GPB_LIBRARY]
# [GPB_SANITIZE]. GPB_SLURM_KEEP=1 keeps the folder for a post-mortem.
set -u
: "${GPB_DAEMON:?run through meson test}" "${GPB_CTL:?}" "${GPB_SPANK:?}" "${GPB_SLURM_CLIENT:?}"
: "${GPB_SLURM_EPILOG:?}"
if [ "$(id -u)" != 0 ]; then
	echo "not root: Slurm's daemons and the plugin's job start run as root: skipped"
	exit 77
fi
case ${GPB_SANITIZE:-none} in
none | '') ;;
*)
	echo "sanitizer build ($GPB_SANITIZE): slurmstepd cannot load an instrumented plugin: skipped"
	exit 77
	;;
esac
for p in munged slurmctld slurmd srun sbatch squeue scancel scontrol sinfo python3; do
	command -v "$p" >/dev/null 2>&1 || {
		echo "FAIL: $p not found (tools/deps.sh installs slurm-wlm and munge)"
		exit 1
	}
done
unset GPUBROKER_SOCKET GPUBROKER_TOKEN SLURM_JOB_ID SLURM_JOBID SQUEUE_FORMAT

start=$(date +%s)
T=$(mktemp -d /tmp/gpb-slurm.XXXXXX) || exit 1
chmod 755 "$T"
export SLURM_CONF=$T/slurm.conf
SOCK=$T/gpb/gpubroker.sock
STATE=$T/gpbstate
CLIENT=$GPB_SLURM_CLIENT
GPB_PID=
step=setup

log() {
	echo "[$(($(date +%s) - start))s] $*"
}

ctl() {
	"$GPB_CTL" --socket "$SOCK" "$@"
}

pidof_file() {
	[ -f "$1" ] && cat "$1" 2>/dev/null
}

stop_pid() { # stop_pid PID: SIGTERM, then SIGKILL after 5 s
	[ -n "$1" ] || return 0
	kill "$1" 2>/dev/null || return 0
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -9 "$1" 2>/dev/null
	return 0
}

cleanup() {
	rc=$?
	trap - EXIT INT TERM HUP PIPE
	# Jobs first, but only from a controller that is there, and never
	# for long.
	if kill -0 "$(pidof_file "$T/slurmctld.pid")" 2>/dev/null; then
		ids=$(timeout 10 squeue -h -o %A 2>/dev/null)
		[ -n "$ids" ] && timeout 10 scancel $ids 2>/dev/null
		end=$(($(date +%s) + 10))
		while [ -n "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && [ "$(date +%s)" -lt $end ]; do
			sleep 0.1
		done
	fi
	stop_pid "$(pidof_file "$T/slurmd.pid")"
	stop_pid "$(pidof_file "$T/slurmctld.pid")"
	stop_pid "$(pidof_file "$T/munge/munged.pid")"
	stop_pid "$GPB_PID"
	# Whatever else this test started, through Slurm or not (job steps and
	# tasks of a run cut short), carries its SLURM_CONF: nothing else does.
	unset SLURM_CONF
	for e in /proc/[0-9]*/environ; do
		pid=${e#/proc/}
		pid=${pid%/environ}
		tr '\0' '\n' 2>/dev/null <"$e" | grep -qxF "SLURM_CONF=$T/slurm.conf" || continue
		echo "cleanup: process $pid of this test was still running: killed"
		kill -9 "$pid" 2>/dev/null
	done
	if [ "${GPB_SLURM_KEEP:-0}" = 1 ]; then
		echo "kept $T"
	else
		rm -rf "$T"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

fail() {
	echo "FAIL ($step): $*"
	for f in slurmctld.log slurmd.log gpb/daemon.log; do
		echo "--- $f (last 40 lines) ---"
		tail -n 40 "$T/$f" 2>/dev/null
	done
	exit 1
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.1 s until it
# succeeds; fails naming WHAT after SECONDS (of the clock: a Slurm command
# that waits on a controller does not stretch it).
wait_for() {
	secs=$1 what=$2
	shift 2
	end=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt $end ] || fail "timed out after ${secs}s waiting for $what"
		sleep 0.1
	done
}

# A port no socket uses, in any state, below the kernel's ephemeral range
# (where outgoing connections take theirs).
port_free() {
	hex=$(printf '%04X' "$1")
	! awk -v p=":$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {
	low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
	[ "${low:-0}" -gt 12000 ] || low=32768
	while :; do
		p=$((10000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % (low - 10002)))
		port_free "$p" && port_free $((p + 1)) && echo "$p" && return
	done
}

# --- the broker ------------------------------------------------------------
start_broker() {
	"$GPB_DAEMON" --config /dev/null --socket "$SOCK" --socket-mode 0666 --backend sim \
		--sim-devices 2 --sim-memory 4GiB --log-level info >>"$T/gpb/daemon.log" 2>&1 &
	GPB_PID=$!
	wait_for 10 "gpubrokerd on $SOCK" ctl status
	ctl set-mode active >/dev/null || fail "set-mode active"
}
mkdir -p "$T/gpb" "$T/state" "$T/spool" "$T/munge" "$T/out"
start_broker

# --- munge: its own key and socket -------------------------------------------
chmod 700 "$T/munge"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$T/munge/munge.key"
munged --force --socket="$T/munge/munge.sock" --key-file="$T/munge/munge.key" \
	--log-file="$T/munge/munged.log" --pid-file="$T/munge/munged.pid" \
	--seed-file="$T/munge/munged.seed" || fail "munged did not start"
chmod 711 "$T/munge"

# --- Slurm ---------------------------------------------------------------
# Two GPUs as GPU GRES: Slurm only needs character devices to count them
# (the memory is the sim broker's); these are /dev/null's and /dev/zero's
# numbers. Without mknod (no CAP_MKNOD) the node has no GPU GRES and the
# gpus step is skipped.
gres_gpu=
if mknod "$T/dev-nvidia0" c 1 3 2>/dev/null && mknod "$T/dev-nvidia1" c 1 5 2>/dev/null; then
	gres_gpu=1
fi
host=$(hostname -s)
write_plugstack() {
	echo "required $GPB_SPANK socket=$SOCK statedir=$STATE $*" >"$T/plugstack.conf"
}
write_plugstack
write_slurm_conf() { # write_slurm_conf PORT: slurmctld on PORT, slurmd on PORT+1
	port=$1
	cat >"$T/slurm.conf" <<EOF
ClusterName=gpbtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpumem${gres_gpu:+,gpu}
PlugStackConfig=$T/plugstack.conf
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
ReturnToService=2
SlurmdTimeout=30
MessageTimeout=10
KillWait=2
MinJobAge=600
InactiveLimit=0
NodeName=gpbnode NodeAddr=127.0.0.1 CPUs=2 Gres=gpumem:4G${gres_gpu:+,gpu:2} State=UNKNOWN
PartitionName=gpb Nodes=gpbnode Default=YES MaxTime=10 State=UP
EOF
}
echo "NodeName=gpbnode Name=gpumem Count=4G" >"$T/gres.conf"
[ -n "$gres_gpu" ] && echo "NodeName=gpbnode Name=gpu File=$T/dev-nvidia[0-1]" >>"$T/gres.conf"
ctld_up() {
	kill -0 "$(pidof_file "$T/slurmctld.pid")" 2>/dev/null &&
		timeout 5 scontrol ping 2>/dev/null | grep -q UP
}
ctld_died() { # it wrote its pid file, and that process is gone
	[ -s "$T/slurmctld.pid" ] && ! kill -0 "$(pidof_file "$T/slurmctld.pid")" 2>/dev/null
}
# The controller, on a fresh pair of ports when the first ones were taken
# meanwhile (it forks, then dies of "Address already in use").
try=0
while :; do
	try=$((try + 1))
	# GPB_SLURM_PORT: the first try's port (to see this retry work).
	if [ $try = 1 ] && [ -n "${GPB_SLURM_PORT:-}" ]; then
		write_slurm_conf "$GPB_SLURM_PORT"
	else
		write_slurm_conf "$(pick_port)"
	fi
	rm -f "$T/slurmctld.pid"
	slurmctld -i || fail "slurmctld did not start"
	end=$(($(date +%s) + 15))
	until ctld_up || ctld_died || [ "$(date +%s)" -ge $end ]; do
		sleep 0.1
	done
	ctld_up && break
	if ! grep -q "Address already in use" "$T/slurmctld.log" 2>/dev/null || [ $try -ge 5 ]; then
		fail "slurmctld is not up"
	fi
	stop_pid "$(pidof_file "$T/slurmctld.pid")"
	: >"$T/slurmctld.log"
done
slurmd -N gpbnode || fail "slurmd did not start"
node_idle() {
	sinfo -h -n gpbnode -o %T | grep -qx idle
}
wait_for 30 "node gpbnode idle" node_idle
log "Slurm up (ports $port, $((port + 1)))"

# --- helpers over the broker's listings ------------------------------------
# json_get COMMAND PYTHON-EXPRESSION: the expression over `d` (the JSON).
json_get() {
	ctl -o json "$1" | python3 -c "import json,sys; d=json.load(sys.stdin); print($2)"
}
partition_names() {
	json_get partitions "' '.join(sorted(p['name'] for p in d['partitions']))"
}
# partition_field NAME EXPR: EXPR over `p`, the partition NAME.
partition_field() {
	json_get partitions "[$2 for p in d['partitions'] if p['name']=='$1'][0]"
}
device_used() { # over every device
	json_get status "sum(int(x['used']) for x in d['devices'])"
}
job_state() {
	scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}
job_reason() {
	scontrol show job "$1" 2>/dev/null | sed -n 's/.*Reason=\([^ ]*\).*/\1/p'
}
job_gone() { # the job ended and its epilog ran (no longer COMPLETING)
	[ -z "$(squeue -h -j "$1" -o %T 2>/dev/null)" ]
}
job_said() { # job_said ID WORD: its output has a line WORD
	grep -qx "$2" "$T/out/$1.out" 2>/dev/null
}
has_partition() {
	partition_names | tr ' ' '\n' | grep -qx "$1"
}
no_partitions() {
	[ -z "$(partition_names)" ]
}
submit() { # submit SBATCH-ARGS... -- COMMAND: prints the job id
	sbatch --parsable --time=5 --output="$T/out/%j.out" "$@"
}

GiB=1073741824

# --- partition: srun --gpu-mem=1G --------------------------------------------
step=partition
out=$(srun --time=2 --gpu-mem=1G "$CLIENT" check $GiB 2>&1) ||
	fail "srun --gpu-mem=1G gpb-slurm-client check: $out"
echo "$out" | grep -qx ok || fail "the client did not finish its checks: $out"
echo "$out" | grep -qx "total $GiB free $GiB" || fail "not a 1 GiB device: $out"
log "partition: $(echo "$out" | tr '\n' ';')"
wait_for 30 "the srun job's partition to go" no_partitions

# --- python: the package finds the partition by itself ---------------------------
step=python
if [ -n "${GPB_PYTHON:-}" ]; then
	out=$(PYTHONPATH=$GPB_PYTHONPATH GPUBROKER_LIBRARY=$GPB_LIBRARY PYTHONDONTWRITEBYTECODE=1 \
		srun --time=2 --gpu-mem=512M "$GPB_PYTHON" "$GPB_SLURM_PYCLIENT" 536870912 2>&1) ||
		fail "srun --gpu-mem=512M python: $out"
	echo "$out" | grep -qx "python ok" || fail "python: $out"
	wait_for 30 "the python job's partition to go" no_partitions
	log "python: the package sees its 512 MiB partition"
else
	log "python: skipped (built without the python package)"
fi

# --- concurrent: two partitions, a third job held by the scheduler -------------
step=concurrent
a=$(submit --gres=gpumem:1G --wrap "exec $CLIENT hold 536870912") || fail "sbatch a"
b=$(submit --gres=gpumem:1G --gpu-mem=1G --wrap "exec $CLIENT churn 805306368") ||
	fail "sbatch b"
wait_for 30 "job $a to hold its memory" job_said "$a" held
wait_for 30 "job $b to allocate" job_said "$b" churning
c=$(submit --gres=gpumem:3G --wrap "exec $CLIENT check 3221225472") || fail "sbatch c"
names=$(partition_names)
[ "$names" = "$(printf 'slurm-%s slurm-%s' "$a" "$b")" ] ||
	fail "partitions '$names' while jobs $a and $b run (expected slurm-$a slurm-$b)"
for j in "$a" "$b"; do
	size=$(partition_field "slurm-$j" "int(p['devices'][0]['size'])")
	[ "$size" = $GiB ] || fail "partition slurm-$j is $size bytes, not $GiB"
	uid=$(partition_field "slurm-$j" "p['uid']")
	[ "$uid" = 0 ] || fail "partition slurm-$j belongs to uid $uid, not the job's (0)"
done
used=$(partition_field "slurm-$a" "int(p['devices'][0]['used'])")
[ "$used" = 536870912 ] || fail "partition slurm-$a uses $used bytes, not 536870912"
table=$(ctl partitions)
echo "$table" | grep -q "slurm-$a" || fail "'gpubrokerctl partitions' does not show slurm-$a: $table"
log "partitions while $a and $b run:"
echo "$table"
# The third job: 1G + 1G + 3G > 4G of gpumem. Held, never started, no partition.
pending_for_resources() {
	[ "$(job_state "$c")" = PENDING ] && [ "$(job_reason "$c")" = Resources ]
}
wait_for 20 "job $c to pend for Resources" pending_for_resources
sleep 1
[ "$(job_state "$c")" = PENDING ] || fail "job $c is $(job_state "$c"), not PENDING"
has_partition "slurm-$c" && fail "pending job $c has a partition"

# --- scancel: a holder, and a churner killed mid-allocation --------------------
step=scancel
scancel "$a" || fail "scancel $a"
scancel --signal=KILL "$b" || fail "scancel --signal=KILL $b"
wait_for 30 "jobs $a and $b to end" job_gone "$a"
wait_for 30 "job $b to end" job_gone "$b"
for j in "$a" "$b"; do
	has_partition "slurm-$j" && fail "partition slurm-$j outlived job $j"
done
# Job c gets the node's gpumem now, runs its checks on 3 GiB and ends.
wait_for 30 "job $c to end" job_gone "$c"
[ "$(job_state "$c")" = COMPLETED ] ||
	fail "job $c is $(job_state "$c"): $(cat "$T/out/$c.out" 2>/dev/null)"
job_said "$c" ok || fail "job $c: $(cat "$T/out/$c.out")"
no_partitions || fail "partitions left after jobs $a $b $c: $(partition_names)"
[ "$(device_used)" = 0 ] || fail "$(device_used) bytes still used after every job ended"
log "concurrent, scancel: $a $b ended, $c pended then passed; no partition, 0 bytes used"

# --- sbatch: steps of one job share its partition ------------------------------
step=sbatch
d=$(submit --gpu-mem=512M --wrap "echo \$GPUBROKER_TOKEN; srun sh -c 'echo \$GPUBROKER_TOKEN'; srun $CLIENT check 536870912") ||
	fail "sbatch d"
wait_for 30 "job $d to end" job_gone "$d"
[ "$(job_state "$d")" = COMPLETED ] || fail "job $d is $(job_state "$d"): $(cat "$T/out/$d.out")"
job_said "$d" ok || fail "job $d: $(cat "$T/out/$d.out")"
tokens=$(grep -Ex '[0-9a-f]{64}' "$T/out/$d.out" | sort -u | wc -l)
[ "$tokens" = 1 ] || fail "the batch step and its srun step saw $tokens tokens: $(cat "$T/out/$d.out")"
no_partitions || fail "partition left after job $d: $(partition_names)"
out=$(salloc --time=2 --gpu-mem=512M srun "$CLIENT" check 536870912 2>&1) ||
	fail "salloc --gpu-mem=512M srun gpb-slurm-client check: $out"
echo "$out" | grep -qx ok || fail "salloc: the client did not finish its checks: $out"
sid=$(echo "$out" | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')
[ -n "$sid" ] || fail "salloc did not say its job id: $out"
wait_for 30 "job $sid (salloc) to end" job_gone "$sid"
no_partitions || fail "partition left after salloc: $(partition_names)"
log "sbatch, salloc: steps share one partition; salloc passes --gpu-mem on"

# --- gpus: a job with GPU GRES gets its partition on its GPUs only ---------------
step=gpus
if [ -n "$gres_gpu" ]; then
	g1=$(submit --gres=gpu:1,gpumem:1G --wrap "GPB_DEVICE=\$SLURM_JOB_GPUS exec $CLIENT hold 134217728") ||
		fail "sbatch g1"
	g2=$(submit --gres=gpu:1,gpumem:1G --wrap "GPB_DEVICE=\$SLURM_JOB_GPUS exec $CLIENT hold 268435456") ||
		fail "sbatch g2"
	wait_for 30 "job $g1 to hold its memory" job_said "$g1" held
	wait_for 30 "job $g2 to hold its memory" job_said "$g2" held
	d1=$(partition_field "slurm-$g1" "' '.join(str(x['device']) for x in p['devices'])")
	d2=$(partition_field "slurm-$g2" "' '.join(str(x['device']) for x in p['devices'])")
	[ "$d1 $d2" = "0 1" ] || [ "$d1 $d2" = "1 0" ] ||
		fail "jobs with one GPU each got partitions on devices '$d1' and '$d2'"
	u1=$(partition_field "slurm-$g1" "int(p['devices'][0]['used'])")
	[ "$u1" = 134217728 ] || fail "partition slurm-$g1 uses $u1 bytes, not 134217728"
	log "gpus: job $g1 on device $d1, job $g2 on device $d2"
	scancel "$g1" "$g2" || fail "scancel $g1 $g2"
	wait_for 30 "job $g1 to end" job_gone "$g1"
	wait_for 30 "job $g2 to end" job_gone "$g2"
	no_partitions || fail "partitions left after jobs $g1 $g2: $(partition_names)"
else
	log "gpus: skipped (mknod is not permitted here, so the node has no GPU GRES)"
fi

# --- planted: a GPU variable the user sets does not move the partition --------
# srun copies the user's environment into the step. Slurm overwrites
# SLURM_STEP_GPUS there (SLURM_JOB_GPUS in a batch step) and leaves the other
# as the user set it: a step that Slurm puts on the free GPU, with the busy
# GPU planted as SLURM_JOB_GPUS, still gets its partition on its own GPU, and
# so does a batch job with it planted as SLURM_STEP_GPUS.
step=planted
if [ -n "$gres_gpu" ]; then
	h=$(submit --gres=gpu:1,gpumem:1G --wrap "GPB_DEVICE=\$SLURM_JOB_GPUS exec $CLIENT hold 134217728") ||
		fail "sbatch h"
	wait_for 30 "job $h to hold its memory" job_said "$h" held
	busy=$(partition_field "slurm-$h" "' '.join(str(x['device']) for x in p['devices'])")
	case $busy in
	0) free=1 ;;
	1) free=0 ;;
	*) fail "job $h with one GPU has its partition on devices '$busy'" ;;
	esac
	# planted_srun SRUN-ARGS...: with $busy planted as SLURM_JOB_GPUS, a
	# step of one GPU that Slurm puts on GPU $free gets its partition there. The client
	# registers on the device Slurm gave the step: refused (no such
	# device) when the partition is elsewhere.
	planted_srun() {
		SLURM_JOB_GPUS=$busy srun --time=2 "$@" sh -c \
			'echo "job=$SLURM_JOB_ID planted=$SLURM_JOB_GPUS step=$SLURM_STEP_GPUS"; GPB_DEVICE=$SLURM_STEP_GPUS exec "$0" hold 67108864' \
			"$CLIENT" >"$T/out/planted.out" 2>&1 &
		srun_pid=$!
		wait_for 30 "the step with SLURM_JOB_GPUS=$busy planted to hold its memory" held_or_ended
		if ! grep -qx held "$T/out/planted.out"; then
			wait "$srun_pid" # all of its output, the client's reason included
			fail "the step with SLURM_JOB_GPUS=$busy planted ($*) did not get a partition on its own GPU: $(cat "$T/out/planted.out")"
		fi
		pj=$(sed -n 's/^job=\([0-9]*\) .*/\1/p' "$T/out/planted.out")
		grep -qx "job=$pj planted=$busy step=$free" "$T/out/planted.out" ||
			fail "the step did not run as planned (planted $busy, on GPU $free): $(cat "$T/out/planted.out")"
		dp=$(partition_field "slurm-$pj" "' '.join(str(x['device']) for x in p['devices'])")
		[ "$dp" = "$free" ] ||
			fail "with SLURM_JOB_GPUS=$busy planted ($*), job $pj on GPU $free got its partition on devices '$dp'"
		log "planted: SLURM_JOB_GPUS=$busy srun $*, Slurm's GPU $free: partition on device $dp"
		scancel "$pj" || fail "scancel $pj"
		wait "$srun_pid"
		wait_for 30 "job $pj to end" job_gone "$pj"
	}
	held_or_ended() {
		grep -qx held "$T/out/planted.out" || ! kill -0 "$srun_pid" 2>/dev/null
	}
	# The GPUs from slurmctld's record of the job (read with its gpumem);
	# then with gres= (no record), from the step's variable alone.
	planted_srun --gres=gpu:1,gpumem:1G
	write_plugstack gres=
	planted_srun --gres=gpu:1 --gpu-mem=256M
	write_plugstack
	pb=$(SLURM_STEP_GPUS=$busy submit --gres=gpu:1,gpumem:1G --wrap "GPB_DEVICE=\$SLURM_JOB_GPUS exec $CLIENT hold 67108864") ||
		fail "sbatch with SLURM_STEP_GPUS planted"
	wait_for 30 "job $pb (SLURM_STEP_GPUS=$busy planted) to hold its memory" job_said "$pb" held
	dp=$(partition_field "slurm-$pb" "' '.join(str(x['device']) for x in p['devices'])")
	[ "$dp" = "$free" ] ||
		fail "with SLURM_STEP_GPUS=$busy planted, batch job $pb got its partition on devices '$dp', not $free"
	scancel "$h" "$pb" || fail "scancel $h $pb"
	wait_for 30 "job $h to end" job_gone "$h"
	wait_for 30 "job $pb to end" job_gone "$pb"
	no_partitions || fail "partitions left after jobs $h $pj $pb: $(partition_names)"
else
	log "planted: skipped (mknod is not permitted here, so the node has no GPU GRES)"
fi

# --- user: a job of another uid owns its partition ------------------------------
# The client and libgpubroker are copied where that user can read them (the
# build tree may be under /root).
step=user
mkdir -p "$T/bin"
cp "$CLIENT" "$T/bin/gpb-slurm-client"
for lib in $(ldd "$CLIENT" | sed -n 's/.*libgpubroker[^ ]* => \([^ ]*\) .*/\1/p'); do
	cp "$lib" "$T/bin/"
done
chmod 755 "$T/bin" "$T/bin"/*
chmod 1777 "$T/out"
e=$(submit --uid=nobody --gid="$(id -gn nobody)" --chdir="$T" --gpu-mem=256M \
	--wrap "export LD_LIBRARY_PATH=$T/bin; $T/bin/gpb-slurm-client check 268435456 && exec $T/bin/gpb-slurm-client hold 67108864") ||
	fail "sbatch --uid=nobody"
wait_for 30 "job $e (uid nobody) to hold its memory" job_said "$e" held
job_said "$e" ok || fail "job $e: $(cat "$T/out/$e.out")"
uid=$(partition_field "slurm-$e" "p['uid']")
[ "$uid" = "$(id -u nobody)" ] || fail "partition slurm-$e belongs to uid $uid, not nobody's"
used=$(partition_field "slurm-$e" "int(p['devices'][0]['used'])")
[ "$used" = 67108864 ] || fail "partition slurm-$e uses $used bytes, not 67108864"
scancel "$e" || fail "scancel $e"
wait_for 30 "job $e to end" job_gone "$e"
no_partitions || fail "partition left after job $e: $(partition_names)"
log "user: job $e ran as nobody in its own partition"

# --- restarts: slurmd and the broker restarted under running jobs -----------------
# slurmd (and so the plugin in it) restarted: the job's end still destroys
# the partition. The broker restarted: its partitions are gone with it, and
# the job's end finds nothing to destroy and removes the token file.
step=restarts
token_files() {
	ls "$STATE" 2>/dev/null | grep -c '\.token$'
}
r=$(submit --gpu-mem=256M --wrap "exec $CLIENT hold 67108864") || fail "sbatch r"
wait_for 30 "job $r to hold its memory" job_said "$r" held
stop_pid "$(pidof_file "$T/slurmd.pid")"
slurmd -N gpbnode || fail "slurmd did not start again"
has_partition "slurm-$r" || fail "partition slurm-$r gone when slurmd restarted"
scancel "$r" || fail "scancel $r"
wait_for 60 "job $r to end under the new slurmd" job_gone "$r"
no_partitions || fail "partition left after job $r (slurmd restarted): $(partition_names)"
[ "$(token_files)" = 0 ] || fail "token file left after job $r: $(ls "$STATE")"
r=$(submit --gpu-mem=256M --wrap "exec $CLIENT hold 67108864") || fail "sbatch r2"
wait_for 30 "job $r to hold its memory" job_said "$r" held
stop_pid "$GPB_PID"
start_broker
no_partitions || fail "a restarted broker has partitions: $(partition_names)"
scancel "$r" || fail "scancel $r"
wait_for 30 "job $r to end" job_gone "$r"
no_partitions || fail "partition left after job $r (broker restarted): $(partition_names)"
[ "$(token_files)" = 0 ] || fail "token file left after job $r: $(ls "$STATE")"
wait_for 30 "node gpbnode idle" node_idle
log "restarts: slurmd and the broker restarted under jobs; nothing left"

# --- refusals: sizes the plugin or the broker will not take ----------------------
step=refusals
# refused WHAT PATTERN SRUN-ARGS...: the job must fail, its output match PATTERN
refused() {
	what=$1 pattern=$2
	shift 2
	out=$(srun --time=1 "$@" 2>&1) && fail "$what: the job ran: $out"
	echo "$out" | grep -q -- "$pattern" || fail "$what: no '$pattern' in: $out"
}
refused "a malformed --gpu-mem" "gpu-mem=12Q: expected a size" --gpu-mem=12Q true
refused "--gpu-mem over the job's gpumem GRES" "more than the job's gpumem GRES" \
	--gres=gpumem:1G --gpu-mem=2G true
refused "a partition over the device" "asked 5368709120, available 4294967296" \
	--gpu-mem=5G true
no_partitions || fail "partitions left after refused jobs: $(partition_names)"

# --- leftover: a partition of the job's name without a token file is replaced ----
step=leftover
f=$(submit --hold --gpu-mem=256M --wrap "exec $CLIENT check 268435456") || fail "sbatch --hold"
ctl partition-create "slurm-$f" --uid 0 --size 64M >/dev/null || fail "partition-create slurm-$f"
scontrol release "$f" || fail "scontrol release $f"
wait_for 30 "job $f to end" job_gone "$f"
job_said "$f" ok || fail "job $f in place of a leftover partition: $(cat "$T/out/$f.out")"
no_partitions || fail "partition left after job $f: $(partition_names)"

# --- broker-down: fail closed, and fail_open ------------------------------------
step=broker-down
stop_pid "$GPB_PID"
GPB_PID=
out=$(srun --time=1 --gpu-mem=1G true 2>&1) && fail "a --gpu-mem job started with the broker down: $out"
echo "$out" | grep -q "$SOCK" || fail "the job's error does not name the socket $SOCK: $out"
log "broker down, --gpu-mem job refused: $(echo "$out" | grep gpubroker | head -n 1)"
out=$(srun --time=1 true 2>&1) || fail "a job without --gpu-mem failed with the broker down: $out"
write_plugstack fail_open
out=$(srun --time=1 --gpu-mem=1G sh -c 'echo "token=${GPUBROKER_TOKEN:-none}"' 2>&1) ||
	fail "fail_open: the job did not start: $out"
echo "$out" | grep -qx "token=none" || fail "fail_open: $out"
echo "$out" | grep -q "fail_open" || fail "fail_open: the job was not told: $out"
write_plugstack
start_broker

# --- epilog: the node Epilog backstop destroys a partition left behind ----------
step=epilog
ctl partition-create slurm-999999 --uid 0 --size 64M >/dev/null || fail "partition-create"
SLURM_JOB_ID=999999 GPUBROKER_SOCKET=$SOCK GPUBROKERCTL=$GPB_CTL "$GPB_SLURM_EPILOG" ||
	fail "gpubroker-slurm-epilog exited $?"
no_partitions || fail "gpubroker-slurm-epilog left $(partition_names)"
SLURM_JOB_ID=999999 GPUBROKER_SOCKET=$SOCK GPUBROKERCTL=$GPB_CTL "$GPB_SLURM_EPILOG" ||
	fail "gpubroker-slurm-epilog exited $? for a job without a partition"

# --- leaks ------------------------------------------------------------------
step=leaks
no_partitions || fail "partitions left: $(partition_names)"
[ "$(token_files)" = 0 ] || fail "token files left in $STATE: $(ls "$STATE")"
log "passed in $(($(date +%s) - start))s"
exit 0
