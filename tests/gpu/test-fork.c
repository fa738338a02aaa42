/*
 * test-fork.c (gpu-fork) - a forked child starts afresh for the whole
 * library (issue 25, item 7).
 *
 * A CUDA mapping is not valid in a forked child (the driver's state is not
 * inherited), yet the library's slab cache, context records and kept
 * descriptors were, so a child's new connection, handed the parent's slab
 * again by the daemon, got the parent's mapping back. Now: the parent
 * maps a slab and forks; in the child the mapping counters read zero, the
 * parent's client refuses every call (GPB_E_INVALID: its socket is the
 * parent's connection), a new connection maps the slab itself (one open),
 * and its bytes read and write through the driver (the fake); the parent's
 * bytes and connection are intact afterwards. Before the fix the child's
 * allocation came from the parent's cached mapping (no open).
 *
 * On a GPU the child's driver calls may fail (CUDA does not support a
 * child of a process that used it): what the child's allocation answers is
 * printed, and only the fresh state is checked.
 */
#include "gpu-common.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (1u << 20)

static unsigned char buf[SIZE];

static int child(const struct gt_daemon *d, gpb_client *parent, uint64_t inst)
{
	struct gpb_mapping_stats ms;
	struct gpb_allocation x, b;
	GPB(gpb_mapping_stats(&ms));
	CHECK(ms.opens == 0 && ms.open_now == 0);
	CHECK(gpb_alloc(parent, inst, SIZE, 0, &x) == GPB_E_INVALID);
	gpb_client *c = gt_connect(d, "gpu-fork-child");
	int rc = gpb_alloc(c, gt_register(c, 0), SIZE, 0, &b);
	if (!gt_fake()) {
		printf("a forked child's allocation: %s%s%s\n", rc < 0 ? gpb_strerror(rc) : "ok",
		       rc < 0 ? ": " : "", rc < 0 ? gpb_last_error() : "");
		gpb_disconnect(parent);
		gpb_disconnect(c);
		return 0;
	}
	GPB(rc);
	GPB(gpb_mapping_stats(&ms));
	CHECK(ms.opens == 1 && ms.open_now == 1); /* mapped here, not the parent's */
	memset(buf, 0x3c, SIZE);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)b.ptr, buf, SIZE));
	memset(buf, 0, SIZE);
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)b.ptr, SIZE));
	for (size_t i = 0; i < SIZE; i++)
		CHECK(buf[i] == 0x3c);
	gpb_disconnect(parent); /* the parent's: nothing said, nothing unmapped there */
	GPB(gpb_free(c, b.id));
	gpb_disconnect(c);
	return 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *c = gt_connect(&d, "gpu-fork");
	uint64_t inst = gt_register(c, 0);
	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	memset(buf, 0x5a, SIZE);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, SIZE));

	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(child(&d, c, inst));
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* The parent's mapping, bytes and connection are its own still. */
	memset(buf, 0, SIZE);
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)a.ptr, SIZE));
	for (size_t i = 0; i < SIZE; i++)
		CHECK(buf[i] == 0x5a);
	struct gpb_allocation a2;
	GPB(gpb_alloc(c, inst, SIZE, 0, &a2));
	GPB(gpb_free(c, a2.id));
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	gt_daemon_stop(&d);
	CHECK(gt_fake_violations() == 0);
	printf("ok: a forked child starts afresh; the parent's mappings stay the parent's\n");
	return 0;
}
