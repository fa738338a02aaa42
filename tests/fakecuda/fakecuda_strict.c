/*
 * fakecuda_strict.c - what makes the fake libcuda.so.1 refuse what a real
 * driver refuses (issue 15), apart from fakecuda.c to keep each file short.
 *
 * - Small allocations share blocks: cuMemAlloc of less than 2 MiB is carved
 *   from a 2 MiB block of this process (as the driver packs them), and its
 *   IPC handle maps the whole block: the importer's pointer is the
 *   allocation's place in it, and cuMemGetAddressRange there answers the
 *   block, neighbours included (the programming guide's warning: IPC shares
 *   "the entire underlying memory block").
 * - Pool allocations are carved from the pool's segments (32 MiB, or the
 *   request rounded up to 2 MiB when larger); an imported pool pointer maps
 *   its segment, and cuMemGetAddressRange answers the segment. A segment
 *   goes back to the driver with its last allocation (release threshold 0;
 *   whether a real exportable pool does that is for the gpu suite to say).
 * - FAKECUDA_IPC_POLICY=same-uid|all: whether cuIpcOpenMemHandle opens a
 *   handle exported by a process of another effective uid. The default is
 *   same-uid: the NVIDIA kernel module shares an object with another client
 *   under the policy the exporter asked for (RS_SHARE_TYPE_ALL, or
 *   RS_SHARE_TYPE_OS_SECURITY_TOKEN, which compares the users' tokens), and
 *   which one CUDA asks for is not in the open sources; a fake that opens
 *   what a real driver may refuse would hide every cross-user failure, so
 *   it refuses (CUDA_ERROR_NOT_PERMITTED, a guess at the code).
 * - Legacy handles do not cross PID namespaces: an opener in another
 *   namespace than the exporter's (/proc/self/ns/pid) is refused
 *   (CUDA_ERROR_INVALID_HANDLE). FAKECUDA_PIDNS=N pretends this process is in
 *   namespace N, so a test needs no privileges to make one.
 * - cuInit in a process whose /proc is not of its PID namespace (made with
 *   unshare(CLONE_NEWPID) alone, /proc still the parent's: /proc/self names
 *   another pid than getpid()) is CUDA_ERROR_OPERATING_SYSTEM, as the driver
 *   answered on an H100 (driver 580.159.04, issue 25); a container mounts
 *   its own /proc. A process in a child PID namespace sees none of the
 *   other processes' pids, so it never reaps their memory (fake_reap).
 * - FAKECUDA_COMPUTE_MODE=MODE[,MODE...] (default, exclusive-process,
 *   prohibited; one per device, the last repeated): the attribute, and
 *   contexts refused as the driver refuses them (prohibited: no context,
 *   CUDA_ERROR_UNKNOWN as cuDevicePrimaryCtxRetain documents;
 *   exclusive-process: a second process's context is
 *   CUDA_ERROR_DEVICE_UNAVAILABLE).
 * - FAKECUDA_CONTEXT_OVERHEAD=BYTES (default 32 MiB): the device memory a
 *   process's context takes from its first retain to its last release,
 *   visible to every process in cuMemGetInfo (a real H100's is hundreds of
 *   MiB: test-gpu-capacity prints it).
 * - FAKECUDA_MPS=1: every process is a client of one MPS control daemon
 *   (CU_DEVICE_ATTRIBUTE_MPS_ENABLED reads 1): contexts go through the MPS
 *   server, so an exclusive-process device takes a context from each
 *   process, as an H100 under MPS did (driver 580.159.04).
 * - FAKECUDA_NO_RDMA=1: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
 *   reads 0 (an H100 reads 1, the default) and cuMemCreate refuses
 *   allocFlags.gpuDirectRDMACapable (CUDA_ERROR_INVALID_VALUE, a guess at
 *   the code).
 * - FAKECUDA_NO_VMM_EXPORT=1: the devices advertise VMM with POSIX
 *   descriptors, but cuMemExportToShareableHandle answers
 *   CUDA_ERROR_NOT_SUPPORTED (as Confidential Computing or a virtualised
 *   GPU may; the code is a guess).
 * - FAKECUDA_MIG=1: the devices are MIG instances: cuDeviceGetUuid_v2
 *   answers the instance's UUID, the old cuDeviceGetUuid the parent GPU's,
 *   and the name says "MIG".
 */
#include "fakecuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_SEGMENT (32u << 20) /* a pool's segment */
#define FAKE_ALIGN   512u        /* of allocations carved from blocks */
#define FAKE_MODES   8

bool fake_mig;
bool fake_mps;
bool fake_no_rdma, fake_no_vmm_export;
static bool fake_ipc_all;
static uint64_t fake_ctx_overhead = 32u << 20;
static int fake_modes[FAKE_MODES];
static uint64_t fake_pidns_override;

/* An allocation carved from a block (this process's). */
struct fake_sub {
	struct fake_sub *next;
	uintptr_t ptr;
	uint64_t size;
	struct fake_mem *block;
};

static struct fake_sub *fake_subs; /* under fake_lock */

void fake_strict_settings(void)
{
	const char *v;
	fake_ipc_all = (v = getenv("FAKECUDA_IPC_POLICY")) && strcmp(v, "all") == 0;
	if ((v = getenv("FAKECUDA_CONTEXT_OVERHEAD")))
		fake_ctx_overhead = strtoull(v, NULL, 10);
	fake_mig = (v = getenv("FAKECUDA_MIG")) && strcmp(v, "1") == 0;
	fake_mps = (v = getenv("FAKECUDA_MPS")) && strcmp(v, "1") == 0;
	fake_no_rdma = (v = getenv("FAKECUDA_NO_RDMA")) && strcmp(v, "1") == 0;
	fake_no_vmm_export = (v = getenv("FAKECUDA_NO_VMM_EXPORT")) && strcmp(v, "1") == 0;
	if ((v = getenv("FAKECUDA_PIDNS")))
		fake_pidns_override = strtoull(v, NULL, 10);
	int mode = CU_COMPUTEMODE_DEFAULT, n = 0;
	char buf[256];
	char *save = NULL;
	snprintf(buf, sizeof(buf), "%s", getenv("FAKECUDA_COMPUTE_MODE") ?: "");
	for (char *tok = strtok_r(buf, ",", &save); tok && n < FAKE_MODES;
	     tok = strtok_r(NULL, ",", &save)) {
		mode = strcmp(tok, "exclusive-process") == 0 ? CU_COMPUTEMODE_EXCLUSIVE_PROCESS
		       : strcmp(tok, "prohibited") == 0      ? CU_COMPUTEMODE_PROHIBITED
		                                             : CU_COMPUTEMODE_DEFAULT;
		fake_modes[n++] = mode;
	}
	while (n < FAKE_MODES)
		fake_modes[n++] = mode;
}

int fake_compute_mode(int dev)
{
	return dev >= 0 && dev < FAKE_MODES ? fake_modes[dev] : CU_COMPUTEMODE_DEFAULT;
}

CUresult fake_ctx_opened(int dev)
{
	int mode = fake_compute_mode(dev);
	if (mode == CU_COMPUTEMODE_PROHIBITED)
		return CUDA_ERROR_UNKNOWN;
	/* Under MPS the server holds the device's one context. */
	return fake_ctx_charge(dev, true, fake_ctx_overhead,
	                       fake_mps ? CU_COMPUTEMODE_DEFAULT : mode);
}

void fake_ctx_closed(int dev)
{
	fake_ctx_charge(dev, false, 0, CU_COMPUTEMODE_DEFAULT);
}

uint64_t fake_real_pidns(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t fake_pidns(void)
{
	return fake_pidns_override ? fake_pidns_override : fake_real_pidns();
}

bool fake_proc_foreign(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (n <= 0)
		return false; /* no /proc at all: not this case */
	buf[n] = '\0';
	return strtol(buf, NULL, 10) != (long)getpid();
}

CUresult fake_ipc_allowed(uint32_t uid, uint64_t pidns)
{
	if (pidns != fake_pidns())
		return CUDA_ERROR_INVALID_HANDLE;
	if (!fake_ipc_all && uid != (uint32_t)geteuid())
		return CUDA_ERROR_NOT_PERMITTED;
	return CUDA_SUCCESS;
}

static uint64_t fake_round(uint64_t n, uint64_t to)
{
	return (n + to - 1) / to * to;
}

/* Carves size bytes from block m (lock held): 0, or -1 when it has no room. */
static int fake_carve(struct fake_mem *m, uint64_t size, struct fake_sub *s)
{
	uint64_t at = fake_round(m->bump, FAKE_ALIGN);
	if (at > m->size || size > m->size - at)
		return -1;
	m->bump = at + size;
	m->live++;
	*s = (struct fake_sub){.next = fake_subs, .ptr = m->base + at, .size = size, .block = m};
	fake_subs = s;
	return 0;
}

CUresult fake_sub_alloc(int dev, size_t size, uint64_t pool, CUdeviceptr *dptr)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_sub *s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = NULL;
	for (m = fake_mem_next(NULL); m; m = fake_mem_next(m)) {
		if (!m->imported && m->packed && m->device == dev && m->pool == pool &&
		    fake_carve(m, size, s) == 0)
			break;
	}
	if (m) {
		pthread_mutex_unlock(&fake_lock);
		*dptr = (CUdeviceptr)s->ptr;
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fake_lock);
	uint64_t bytes =
	    pool ? (size > FAKE_SEGMENT ? fake_round(size, FAKE_BLOCK) : FAKE_SEGMENT) : FAKE_BLOCK;
	CUdeviceptr base;
	CUresult rc = fake_mem_alloc(dev, bytes, pool, &base);
	if (rc != CUDA_SUCCESS) {
		free(s);
		return rc;
	}
	pthread_mutex_lock(&fake_lock);
	m = fake_mem_find((uintptr_t)base, 1);
	m->packed = true;
	fake_carve(m, size, s);
	pthread_mutex_unlock(&fake_lock);
	*dptr = (CUdeviceptr)s->ptr;
	return CUDA_SUCCESS;
}

bool fake_sub_free(CUdeviceptr p, CUresult *rc)
{
	pthread_mutex_lock(&fake_lock);
	for (struct fake_sub **pp = &fake_subs; *pp; pp = &(*pp)->next) {
		struct fake_sub *s = *pp;
		if (s->ptr != (uintptr_t)p)
			continue;
		*pp = s->next;
		struct fake_mem *m = s->block;
		bool last = --m->live == 0;
		pthread_mutex_unlock(&fake_lock);
		free(s);
		/* The block goes back to the driver with its last allocation. */
		if (last)
			fake_mem_drop(m);
		*rc = CUDA_SUCCESS;
		return true;
	}
	pthread_mutex_unlock(&fake_lock);
	return false;
}

int fake_sub_range(uintptr_t p, uintptr_t *base, uint64_t *size, struct fake_mem **block)
{
	for (struct fake_sub *s = fake_subs; s; s = s->next) {
		if (p >= s->ptr && p - s->ptr < s->size) {
			*base = s->ptr;
			*size = s->size;
			*block = s->block;
			return 0;
		}
	}
	return -1;
}

/* The driver's older entry point (cuda.h maps cuDeviceGetUuid to _v2): for
 * a MIG instance, the parent GPU's UUID. */
#undef cuDeviceGetUuid
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	CUresult rc = cuDeviceGetUuid_v2(uuid, dev);
	if (rc == CUDA_SUCCESS && fake_mig)
		uuid->bytes[0] = (char)0xfa;
	return rc;
}
