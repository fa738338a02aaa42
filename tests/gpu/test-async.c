/*
 * test-async.c (gpu-async) - allocator "async" on the cuda backend: slabs
 * from the daemon's stream-ordered memory pool, imported by clients.
 *
 * As admin the test switches to "async"; a client allocates (the memory
 * reads zero: scrubbed, where the fake fills new memory with 0xa5), writes
 * it with cuMemcpyHtoD and exports it. A second process opens it by name
 * (it imports the daemon's pool from the descriptor that comes with the
 * handle, then the pointer), reads the bytes, writes its own, allocates and
 * frees one more (the pool imported once serves both) and leaves; the first
 * reads the second's bytes and frees. Nothing is freed under a live import
 * (the fake counts that as a violation) and every slab goes back.
 *
 * Then, against the fake only, a daemon whose device reports no pools
 * (FAKECUDA_NO_POOLS=1) refuses "async" with GPB_E_NOT_SUPPORTED. On a GPU
 * without shareable pools the test is skipped (77) with the daemon's reason.
 */
#include "gpu-common.h"

#include <string.h>

#define SIZE ((1ull << 20) + 4096)

static bool all_zero(const unsigned char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (buf[i])
			return false;
	}
	return true;
}

/* The second process: opens name, checks pattern 1, writes pattern 2. */
static int reader(const char *socket, const char *name)
{
	unsigned char want[4096];
	struct gpb_allocation a, b;
	gpb_client *c = NULL;

	GPB(gpb_connect(socket, "gpu-async-reader", &c));
	GPB(gpb_open_shared(c, name, &a));
	CHECK(a.size == SIZE);
	gt_cuda_context(0);
	gt_expect_and_write(a.ptr, SIZE, 1, 2);

	/* A slab of its own from the same pool: scrubbed too. */
	uint64_t inst = gt_register(c, 0);
	GPB(gpb_alloc(c, inst, 4096, 0, &b));
	CU(cu.MemcpyDtoH(want, (CUdeviceptr)(uintptr_t)b.ptr, 4096));
	CHECK(all_zero(want, 4096));
	GPB(gpb_free(c, b.id));
	GPB(gpb_detach(c, a.id));

	struct gpb_mapping_stats st;
	GPB(gpb_mapping_stats(&st));
	CHECK(st.opens == 2 && st.open_now == 0);
	gpb_disconnect(c);
	return 0;
}

/* The fake's device without pools: "async" is refused, nothing changes. */
static void refused_without_pools(void)
{
	struct gt_daemon d;
	const char *env[] = {"FAKECUDA_NO_POOLS=1", NULL};
	gt_daemon_start(&d, "cuda", NULL, env);
	gpb_client *c = gt_connect(&d, "gpu-async-refused");
	CHECK(gpb_set_allocator(c, "async") == GPB_E_NOT_SUPPORTED);
	CHECK(strstr(gpb_last_error(), "stream-ordered memory pool") != NULL);
	uint64_t inst = gt_register(c, 0);
	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, 4096, 0, &a));
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	gt_daemon_stop(&d);
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 4 && strcmp(argv[1], "reader") == 0)
		return reader(argv[2], argv[3]);

	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *c = gt_connect(&d, "gpu-async");
	int rc = gpb_set_allocator(c, "async");
	if (rc == GPB_E_NOT_SUPPORTED && !gt_fake()) {
		printf("skip: %s\n", gpb_last_error());
		gpb_disconnect(c);
		gt_daemon_stop(&d);
		return 77;
	}
	GPB(rc);
	uint64_t inst = gt_register(c, 0);

	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	unsigned char *buf = malloc(SIZE), *back = malloc(SIZE);
	CHECK(buf && back);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)a.ptr, SIZE));
	CHECK(all_zero(back, SIZE));
	/* A slab is never under 2 MiB; the policy charges what was asked. */
	struct gpb_pool_stats st;
	GPB(gpb_stats(c, 0, &st));
	CHECK(st.slabs == 1 && st.reserved == (2u << 20));
	CHECK(gt_status_used(c) == SIZE);
	gt_fill(buf, SIZE, 1);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0x5a, SIZE));
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, SIZE));
	CU(cu.CtxSynchronize());
	GPB(gpb_export(c, a.id, "async-frame", -1));

	char *args[] = {"reader", d.socket, "async-frame", NULL};
	CHECK(gt_wait(gt_spawn_self(args, NULL)) == 0);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)a.ptr, SIZE));
	gt_fill(buf, SIZE, 2);
	CHECK(memcmp(buf, back, SIZE) == 0);
	GPB(gpb_free(c, a.id));
	gt_wait_slabs(c, 0, 0);
	CHECK(gt_status_used(c) == 0);

	struct gpb_mapping_stats ms;
	GPB(gpb_mapping_stats(&ms));
	CHECK(ms.open_now == 0);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	if (gt_fake())
		refused_without_pools();
	free(buf);
	free(back);
	printf("ok: async slabs scrubbed, shared with another process through the pool, "
	       "freed after every import\n");
	return 0;
}
