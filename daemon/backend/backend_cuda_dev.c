/*
 * backend_cuda_dev.c - the cuda backend's device checks: compute modes,
 * the capacity the broker may promise, and who can use legacy IPC.
 *
 * Compute modes (issue 15, finding 8): the daemon holds the device's primary
 * context for its whole life, so on an exclusive-process device no client
 * could make its own, and on a prohibited one nobody can: both are left out
 * with the reason, rather than served to clients that would all fail. An
 * exclusive-process device is served when the daemon is an MPS client
 * (CU_DEVICE_ATTRIBUTE_MPS_ENABLED, issue 25): the MPS server then holds
 * the device's one context and every MPS client gets its own through it.
 *
 * Capacity (finding 7): cuMemGetInfo's total is not what clients can have.
 * Every process with a context on the device (the daemon, each client) pays
 * for it in device memory (hundreds of MiB on current GPUs), and other
 * processes may hold memory already. The broker promises the total minus
 * what was in use when the daemon started (its own context included) minus
 * a reserve for the clients' contexts.
 */
#include "backend_cuda_dev.h"

#include <stdio.h>
#include <unistd.h>

#include "log.h"

bool cuda_dev_mode_ok(int mode, bool mps, char *why, size_t len)
{
	/* Under MPS the one process with a context on the device is the MPS
	 * server: the daemon and its clients, all clients of one control
	 * daemon, share it, whatever the mode. Measured on an H100 (driver
	 * 580.159.04): VMM descriptors and legacy handles import across the
	 * MPS clients of one control daemon of one user. */
	if (mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS && !mps) {
		snprintf(why, len,
		         "compute mode exclusive-process and this daemon is no MPS client: its "
		         "own context would keep every client's off the device (start "
		         "nvidia-cuda-mps-control -d and run gpubrokerd and its clients with the "
		         "same CUDA_MPS_PIPE_DIRECTORY, or set the mode to DEFAULT: nvidia-smi -i "
		         "N -c DEFAULT)");
		return false;
	}
	if (mode == CU_COMPUTEMODE_PROHIBITED) {
		snprintf(why, len,
		         "compute mode prohibited: no process may have a context on the device");
		return false;
	}
	return true;
}

void cuda_dev_budget(int ordinal, size_t free_bytes, size_t total, const struct backend_config *cfg,
                     struct backend_device_info *info)
{
	uint64_t reserve = cfg ? cfg->reserve : BACKEND_DEFAULT_RESERVE;
	if (!cfg || !cfg->reserve_explicit) {
		/* A default must not take a small device away. */
		if (reserve > total / 4)
			reserve = total / 4;
	}
	info->in_use = free_bytes < total ? total - free_bytes : 0;
	info->reserve = reserve;
	uint64_t kept = info->in_use + reserve;
	log_info("cuda: CUDA device %d: %llu MiB in use at start (this daemon's context and "
	         "other processes), %llu MiB reserved for clients' contexts (`reserve`): "
	         "%llu MiB to hand out",
	         ordinal, (unsigned long long)(info->in_use >> 20),
	         (unsigned long long)(reserve >> 20),
	         (unsigned long long)(kept < total ? (total - kept) >> 20 : 0));
}

void cuda_dev_log_ipc_users(void)
{
	/* The kernel module shares an exported object under the exporter's
	 * policy: every process, or only those whose security token (the
	 * user) matches. Which one CUDA's legacy IPC asks for is not public:
	 * the conservative reading is the daemon's own user. */
	log_info("cuda: legacy IPC handles (cuIpcOpenMemHandle) open in processes of uid %u "
	         "(this daemon's user) in this PID namespace; whether the driver lets other "
	         "users' processes open them is its share policy (docs/cuda.md): clients of "
	         "other users, and in other PID namespaces, need file-descriptor sharing",
	         (unsigned)geteuid());
	/* Measured on an H100 and an H200 (driver 580.159.04): processes of
	 * every user opened them, and a handle changed in one byte opened
	 * the next allocation. The broker hands a handle only to the
	 * allocation's owner; the driver does not hold others to that. */
	log_warn("cuda: transport ipc: a legacy IPC handle is a capability anyone may guess "
	         "(on driver 580 they open for every user, and consecutive handles differ in 2 "
	         "of 64 bytes): on a machine shared by users use transport vmm (docs/cuda.md)");
}
