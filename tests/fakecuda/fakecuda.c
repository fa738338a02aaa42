/*
 * fakecuda.c - a test-only stand-in for libcuda.so.1.
 *
 * NOT a driver and no proof of anything on a GPU: it lets the cuda
 * backend's code paths (loading, contexts, errors, slab life cycle,
 * scrubbing, IPC open/close accounting) run on machines without one, so
 * that CI exercises them. The gpu suite proper runs against the real driver.
 *
 * "Device memory" is host memory: each cuMemAlloc is a file in
 * $FAKECUDA_DIR (mapped shared), its IPC handle names the file, and
 * cuIpcOpenMemHandle in another process maps the same file, so bytes written
 * by one process are read by another. Device pointers are host addresses.
 * A state file in the same directory (locked with flock) records every live
 * allocation with its owner and importers, so that cuMemGetInfo sees all
 * processes, memory of dead processes is reclaimed (as the driver does at
 * process exit), and freeing memory that a live process still has open
 * through IPC - which CUDA leaves undefined - is counted as a violation
 * (fakecuda_violations()).
 *
 * Environment:
 *   FAKECUDA_DIR      state directory (default /tmp/fakecuda-<uid>)
 *   FAKECUDA_DEVICES  device count (default 1; 0 = cuInit succeeds, no device)
 *   FAKECUDA_MEMORY   bytes per device (default 1 GiB)
 *   FAKECUDA_CLEAN=1  new allocations are zero (default: filled with 0xa5,
 *                     since real cuMemAlloc memory is not cleared)
 *   FAKECUDA_NO_POOLS=1  devices report no memory pools (the "async"
 *                     allocator must be refused)
 *   FAKECUDA_FAIL     comma-separated NAME[@N]=CUDA_ERROR_X: entry point NAME
 *                     (e.g. cuMemAlloc, cuInit) fails with that error from
 *                     its Nth call in this process on (default 1)
 *
 * Stream-ordered pools: a pool is an id in this process; its shareable
 * handle is a memfd holding the id, its allocations are cuMemAlloc memory
 * (files, records, violations alike) tagged with the id, and a pointer's
 * export data names the file, so cuMemPoolImportPointer maps it as
 * cuIpcOpenMemHandle does, once the pool with that id was imported.
 * Streams and events are fakecuda_async.c's.
 *
 * Contexts: a mapping or allocation belongs to the context it was made in; a
 * legacy handle opens in one context per device per process
 * (CUDA_ERROR_ALREADY_MAPPED for a second); cuDevicePrimaryCtxReset, a
 * primary context's release to zero and cuCtxDestroy destroy everything
 * made in the context, whose addresses then stay inaccessible, so that a
 * dangling pointer is an error the fake reports (or a crash), never memory.
 *
 * Queued work (fakecuda_async.c): *Async copies and memsets and host
 * functions run only at a synchronisation; closing or freeing memory they
 * still touch is a violation.
 *
 * Only the entry points gpubroker uses exist, under the ABI names cuda.h
 * maps them to (cuMemAlloc_v2 and so on).
 *
 * Files (one library; fakecuda_internal.h declares what they share, all of
 * it hidden: only FAKE_EXPORT functions are exported):
 *   fakecuda.c        the state file, device memory and its IPC handles
 *   fakecuda_ctx.c    cuInit and its settings, errors, injected failures,
 *                     devices, contexts
 *   fakecuda_host.c   registered host memory and the copies
 *   fakecuda_pool.c   stream-ordered memory pools
 *   fakecuda_async.c  streams, events and the work queued on them
 *   fakecuda_strict.c what makes it refuse what a driver refuses: small
 *                     allocations packed into shared 2 MiB blocks, pool
 *                     segments, the IPC share policy (FAKECUDA_IPC_POLICY),
 *                     PID namespaces (FAKECUDA_PIDNS), compute modes
 *                     (FAKECUDA_COMPUTE_MODE), the context overhead
 *                     (FAKECUDA_CONTEXT_OVERHEAD), MIG (FAKECUDA_MIG); see
 *                     the comment at its top
 */
#include "fakecuda_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shared state ---------------------------------------------------------- */

struct fake_shared {
	uint64_t next_serial;
	uint64_t violations;
	uint64_t pidns; /* the PID namespace of the first process, whose pids the records hold */
	struct fake_record rec[FAKE_MAX_RECORDS];
};

/* ---- this process ---------------------------------------------------------- */

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static char fake_dir[256];
static int fake_state_fd = -1;
static int fake_ctl_fd = -1; /* this process's descriptor of the control file */
static struct fake_ctl_id {
	dev_t dev;
	ino_t ino;
} fake_ctl_id;
static struct fake_shared *fake_shared;
static struct fake_mem *fake_mems;

void fake_lock_state(void)
{
	while (flock(fake_state_fd, LOCK_EX) < 0 && errno == EINTR)
		;
}

void fake_unlock_state(void)
{
	flock(fake_state_fd, LOCK_UN);
}

/* A zombie is dead here: its descriptors and mappings are gone (the daemon
 * sees its socket close before anyone reaps it). */
bool fake_pid_alive(int32_t pid)
{
	char path[64], buf[512];
	if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

void fake_mem_path(uint64_t serial, char *out, size_t len)
{
	snprintf(out, len, "%s/mem-%" PRIu64, fake_dir, serial);
}

/* Whether pid still maps the file at path: a process being killed drops its
 * mappings before its descriptors, so this is exact where "alive" is not. */
static bool fake_pid_maps(int32_t pid, const char *path)
{
	char name[64], line[1024];
	snprintf(name, sizeof(name), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(name, "re");
	bool found = false;
	if (!f)
		return false;
	size_t n = strlen(path);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, path);
		found = p && (p[n] == '\n' || p[n] == '\0' || p[n] == ' ');
	}
	fclose(f);
	return found;
}

/* Drops the records of dead owners (the driver frees a process's memory
 * when it exits) and dead importers. State locked. */
void fake_reap(void)
{
	/* A process in a child PID namespace (a container's, with its own
	 * /proc) sees none of the others' pids: to it they would all look dead. */
	if (fake_real_pidns() != fake_shared->pidns)
		return;
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		struct fake_record *r = &fake_shared->rec[i];
		if (!r->owner)
			continue;
		bool held = false;
		for (int j = 0; j < FAKE_MAX_IMPORTER; j++) {
			if (r->importers[j] && !fake_pid_alive(r->importers[j]))
				r->importers[j] = 0;
			held |= r->importers[j] != 0;
		}
		/* VMM memory lives while any process holds it, creator or not. */
		if (r->vmm) {
			if (!held)
				fake_vmm_record_drop(r);
			continue;
		}
		if (!fake_pid_alive(r->owner)) {
			char path[300];
			fake_mem_path(r->serial, path, sizeof(path));
			if (!r->context)
				unlink(path);
			memset(r, 0, sizeof(*r));
		}
	}
}

struct fake_record *fake_record_find(uint64_t serial)
{
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		if (fake_shared->rec[i].owner && !fake_shared->rec[i].context &&
		    fake_shared->rec[i].serial == serial)
			return &fake_shared->rec[i];
	}
	return NULL;
}

uint64_t fake_used(int device)
{
	uint64_t used = 0;
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		if (fake_shared->rec[i].owner && fake_shared->rec[i].device == device)
			used += fake_shared->rec[i].size;
	}
	return used;
}

struct fake_record *fake_records(void)
{
	return fake_shared ? fake_shared->rec : NULL;
}

uint64_t fake_new_serial_locked(void)
{
	return ++fake_shared->next_serial;
}

int fake_open_state(void)
{
	const char *dir = getenv("FAKECUDA_DIR");
	if (dir && *dir)
		snprintf(fake_dir, sizeof(fake_dir), "%s", dir);
	else
		snprintf(fake_dir, sizeof(fake_dir), "/tmp/fakecuda-%u", (unsigned)getuid());
	mkdir(fake_dir, 0700);
	char path[300];
	snprintf(path, sizeof(path), "%s/state", fake_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	/* Processes of other users share a state directory their test opened
	 * to them: the fake, not file modes, decides who may open what. */
	if (fchmod(fd, 0666) < 0 && errno != EPERM) { /* EPERM: another user's, opened already */
		close(fd);
		return -1;
	}
	/* Growing a file of zeros is idempotent: any process may do it. */
	if (ftruncate(fd, sizeof(struct fake_shared)) < 0) {
		close(fd);
		return -1;
	}
	void *p = mmap(NULL, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -1;
	}
	/* The control file, the fake's /dev/nvidiactl: open in every process
	 * from cuInit on, and what every exported descriptor names. */
	snprintf(path, sizeof(path), "%s/nvidiactl", fake_dir);
	int ctl = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	struct stat st;
	if (ctl < 0 || (fchmod(ctl, 0666) < 0 && errno != EPERM) || fstat(ctl, &st) < 0) {
		if (ctl >= 0)
			close(ctl);
		munmap(p, sizeof(struct fake_shared));
		close(fd);
		return -1;
	}
	fake_ctl_fd = ctl;
	fake_ctl_id = (struct fake_ctl_id){st.st_dev, st.st_ino};
	fake_state_fd = fd;
	fake_shared = p;
	uint64_t none = 0, mine = fake_real_pidns();
	__atomic_compare_exchange_n(&fake_shared->pidns, &none, mine, false, __ATOMIC_SEQ_CST,
	                            __ATOMIC_SEQ_CST);
	return 0;
}

void fake_vmm_path(uint64_t serial, char *out, size_t len)
{
	snprintf(out, len, "%s/vmm-%" PRIu64, fake_dir, serial);
}

int fake_ctl_export(uint64_t code)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/nvidiactl", fake_dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && lseek(fd, (off_t)code, SEEK_SET) != (off_t)code) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int fake_ctl_code(int fd, uint64_t *code)
{
	struct stat st;
	off_t at;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != fake_ctl_id.dev ||
	    st.st_ino != fake_ctl_id.ino || (at = lseek(fd, 0, SEEK_CUR)) < 0)
		return -1;
	*code = (uint64_t)at;
	return 0;
}

/* A new serial (an allocation's or a pool's id), unique across processes. */
uint64_t fake_new_serial(void)
{
	fake_lock_state();
	uint64_t serial = ++fake_shared->next_serial;
	fake_unlock_state();
	return serial;
}

void fake_violation(const char *fmt, ...)
{
	va_list ap;
	fake_lock_state();
	fake_shared->violations++;
	fake_unlock_state();
	fprintf(stderr, "fakecuda: pid %d: ", (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- memory ---------------------------------------------------------------------- */

/* The mapping of this process that holds [p, p + n), or NULL. Lock held. */
struct fake_mem *fake_mem_find(uintptr_t p, uint64_t n)
{
	for (struct fake_mem *m = fake_mems; m; m = m->next) {
		if (p >= m->base && p - m->base < m->size && n <= m->size - (p - m->base))
			return m;
	}
	return NULL;
}

void fake_mem_link(struct fake_mem *m)
{
	m->next = fake_mems;
	fake_mems = m;
}

/* Walks this process's mappings: the first (m NULL) or the one after m. Lock
 * held. */
struct fake_mem *fake_mem_next(struct fake_mem *m)
{
	return m ? m->next : fake_mems;
}

void fake_mem_unlink(struct fake_mem *m)
{
	for (struct fake_mem **pp = &fake_mems; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			return;
		}
	}
}

FAKE_EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	NEED_CONTEXT();
	int dev = fake_current()->device;
	fake_lock_state();
	fake_reap();
	uint64_t used = fake_used(dev);
	fake_unlock_state();
	*total = (size_t)fake_memory;
	*free_bytes = (size_t)(used < fake_memory ? fake_memory - used : 0);
	return CUDA_SUCCESS;
}

/* Device memory on dev (of memory pool `pool`, or 0): cuMemAlloc's core. */
CUresult fake_mem_alloc(int dev, size_t size, uint64_t pool, CUdeviceptr *dptr)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_lock_state();
	fake_reap();
	struct fake_record *r = NULL;
	for (int i = 0; i < FAKE_MAX_RECORDS && !r; i++) {
		if (!fake_shared->rec[i].owner)
			r = &fake_shared->rec[i];
	}
	if (!r || fake_used(dev) + size > fake_memory) {
		fake_unlock_state();
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t serial = ++fake_shared->next_serial;
	char path[300];
	fake_mem_path(serial, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	void *p = MAP_FAILED;
	if (fd >= 0 && fchmod(fd, 0666) == 0 && ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		unlink(path);
		fake_unlock_state();
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*r = (struct fake_record){.owner = getpid(),
	                          .device = dev,
	                          .size = size,
	                          .serial = serial,
	                          .uid = (uint32_t)geteuid(),
	                          .pidns = fake_pidns()};
	fake_unlock_state();
	/* Real device memory comes with whatever was there before. */
	if (!fake_clean)
		memset(p, 0xa5, size);
	m->base = (uintptr_t)p;
	m->size = size;
	m->serial = serial;
	m->device = dev;
	m->pool = pool;
	m->ctx = fake_current();
	pthread_mutex_lock(&fake_lock);
	fake_mem_link(m);
	pthread_mutex_unlock(&fake_lock);
	*dptr = (CUdeviceptr)m->base;
	return CUDA_SUCCESS;
}

/* As the driver: an allocation under 2 MiB shares a block with others. */
FAKE_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
	NEED_CONTEXT();
	INJECT("cuMemAlloc");
	if (size > 0 && size < FAKE_BLOCK)
		return fake_sub_alloc(fake_current()->device, size, 0, dptr);
	return fake_mem_alloc(fake_current()->device, size, 0, dptr);
}

/* The owner's uid and PID namespace of allocation serial. */
bool fake_mem_owner(uint64_t serial, uint32_t *uid, uint64_t *pidns)
{
	fake_lock_state();
	struct fake_record *r = fake_record_find(serial);
	if (r) {
		*uid = r->uid;
		*pidns = r->pidns;
	}
	fake_unlock_state();
	return r != NULL;
}

/* A context's memory is a record without a file: cuMemGetInfo counts it. An
 * exclusive-process device (mode) refuses a second process's context. */
CUresult fake_ctx_charge(int dev, bool open, uint64_t bytes, int mode)
{
	CUresult rc = CUDA_SUCCESS;
	pid_t me = getpid();
	fake_lock_state();
	fake_reap();
	struct fake_record *mine = NULL, *free_rec = NULL;
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		struct fake_record *r = &fake_shared->rec[i];
		if (!r->owner) {
			if (!free_rec)
				free_rec = r;
			continue;
		}
		if (!r->context || r->device != dev)
			continue;
		if (r->owner == me)
			mine = r;
		else if (open && mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS)
			rc = CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	if (!open) {
		if (mine)
			memset(mine, 0, sizeof(*mine));
	} else if (rc == CUDA_SUCCESS && !mine) {
		if (!free_rec || fake_used(dev) + bytes > fake_memory)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else
			*free_rec = (struct fake_record){.owner = me,
			                                 .device = dev,
			                                 .size = bytes,
			                                 .context = 1,
			                                 .uid = (uint32_t)geteuid(),
			                                 .pidns = fake_pidns()};
	}
	fake_unlock_state();
	return rc;
}

/* Unmaps m and frees it; with reserve, the addresses stay taken but
 * inaccessible, so that a pointer into destroyed memory can neither reach
 * new memory nor pass for it. */
void fake_unmap(struct fake_mem *m, bool reserve)
{
	if (reserve)
		mmap((void *)m->base, m->size, PROT_NONE,
		     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	else
		munmap((void *)m->base, m->size);
	free(m);
}

/* Frees this process's own allocation m (unlinked), counting a violation
 * per live importer that still maps it. */
static void fake_mem_release(struct fake_mem *m, bool reserve)
{
	char path[300];
	fake_async_closing(m->base, m->size, "cuMemFree");
	fake_mem_path(m->serial, path, sizeof(path));
	fake_lock_state();
	fake_reap();
	struct fake_record *r = fake_record_find(m->serial);
	if (r) {
		for (int j = 0; j < FAKE_MAX_IMPORTER; j++) {
			if (r->importers[j] && r->importers[j] != getpid() &&
			    fake_pid_maps(r->importers[j], path)) {
				fake_shared->violations++;
				fprintf(stderr,
				        "fakecuda: pid %d freed memory %" PRIu64
				        " that pid %d still has open through IPC\n",
				        (int)getpid(), m->serial, (int)r->importers[j]);
			}
		}
		memset(r, 0, sizeof(*r));
	}
	unlink(path);
	fake_unlock_state();
	fake_unmap(m, reserve);
}

/* Own memory (cuMemAlloc or a pool's), or an imported pool pointer, which
 * an importer releases with cuMemFree. */
FAKE_EXPORT CUresult cuMemFree(CUdeviceptr dptr)
{
	NEED_CONTEXT();
	CUresult sub_rc;
	if (fake_sub_free(dptr, &sub_rc))
		return sub_rc;
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	if (!m || m->vmm || (m->imported ? !m->pool : m->base != (uintptr_t)dptr || m->packed)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (m->imported) {
		pthread_mutex_unlock(&fake_lock);
		return fake_unimport(dptr);
	}
	fake_mem_unlink(m);
	pthread_mutex_unlock(&fake_lock);
	fake_mem_release(m, false);
	return CUDA_SUCCESS;
}

void fake_mem_drop(struct fake_mem *m)
{
	pthread_mutex_lock(&fake_lock);
	fake_mem_unlink(m);
	pthread_mutex_unlock(&fake_lock);
	fake_mem_release(m, false);
}

FAKE_EXPORT CUresult cuMemsetD8(CUdeviceptr dptr, unsigned char value, size_t n)
{
	NEED_CONTEXT();
	INJECT("cuMemsetD8");
	/* On the legacy default stream: after the blocking streams' work. */
	fake_async_drain(fake_current(), true);
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, n);
	pthread_mutex_unlock(&fake_lock);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	memset((void *)(uintptr_t)dptr, value, n);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&fake_lock);
	/* The owner sees its own allocation; an importer the whole block
	 * (or pool segment) the handle mapped. */
	uintptr_t base = 0;
	uint64_t size = 0;
	struct fake_mem *m = NULL;
	bool found = fake_sub_range((uintptr_t)dptr, &base, &size, &m) == 0;
	if (!found && (m = fake_mem_find((uintptr_t)dptr, 1))) {
		base = m->base;
		size = m->size;
		found = true;
	}
	if (found) {
		if (pbase)
			*pbase = (CUdeviceptr)base;
		if (psize)
			*psize = (size_t)size;
	}
	pthread_mutex_unlock(&fake_lock);
	return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

void fake_mem_destroy_ctx(struct fake_ctx *ctx)
{
	fake_vmm_destroy_ctx(ctx);
	for (;;) {
		pthread_mutex_lock(&fake_lock);
		struct fake_mem *m = fake_mems;
		while (m && (m->ctx != ctx || m->vmm))
			m = m->next;
		if (m)
			fake_mem_unlink(m);
		pthread_mutex_unlock(&fake_lock);
		if (!m)
			return;
		if (m->imported) {
			fake_unimport_record(m->serial);
			fake_unmap(m, true);
		} else {
			fake_mem_release(m, true);
		}
	}
}

/* The context and device of a pointer here, the rest in fakecuda_copy.c. */
FAKE_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	NEED_INIT();
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)ptr, 1);
	struct fake_mem copy = m ? *m : (struct fake_mem){0};
	pthread_mutex_unlock(&fake_lock);
	if (!m)
		return fake_pointer_attribute(data, attr, ptr, NULL);
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		/* A VMM mapping belongs to no context: the driver answers NULL
		 * (an H100, driver 580). */
		*(CUcontext *)data = copy.vmm ? NULL : (CUcontext)(void *)copy.ctx;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = copy.device;
		return CUDA_SUCCESS;
	default: /* fakecuda_copy.c */
		return fake_pointer_attribute(data, attr, ptr, &copy);
	}
}

/* ---- for tests only ---------------------------------------------------------- */

/* How many times memory was freed while another live process had it open. */
FAKE_EXPORT uint64_t fakecuda_violations(void)
{
	if (!fake_shared)
		return 0;
	fake_lock_state();
	uint64_t v = fake_shared->violations;
	fake_unlock_state();
	return v;
}

/* Open IPC mappings in this process (cuIpcOpenMemHandle minus close). */
FAKE_EXPORT unsigned fakecuda_open_mappings(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_mem *m = fake_mems; m; m = m->next)
		n += m->imported || m->vmm;
	pthread_mutex_unlock(&fake_lock);
	return n;
}
