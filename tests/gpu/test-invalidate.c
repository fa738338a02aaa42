/*
 * test-invalidate.c (gpu-invalidate) - an administrator's invalidate_all
 * and set_allocator on the cuda backend: the daemon releases everything at
 * once, but gives a slab back to the driver only after the client that
 * had it open has closed it.
 *
 * The client learns of the release from the `invalidate` event; its
 * library closes its mappings as it reads the event and answers with
 * invalidate_done. Until then the slab stays allocated (the fake driver
 * counts a cuMemFree under an open mapping as a violation, and
 * cuMemGetInfo shows the slab still held); after it, the memory is back.
 * A client that never reads the event lets go at disconnect.
 */
#include "gpu-common.h"

#include <poll.h>
#include <string.h>

#define SLAB      (64ull << 20)
#define TOLERANCE (32ull << 20) /* other processes on a shared GPU */

static size_t mem_free(void)
{
	size_t free_bytes, total;
	gt_mem_info(&free_bytes, &total);
	return free_bytes;
}

static void on_event(gpb_client *c, const char *name, const char *data, void *arg)
{
	int *seen = arg;
	(void)c;
	(void)data;
	if (strcmp(name, "invalidate") == 0)
		(*seen)++;
}

/* Reads events until an invalidate has been delivered. */
static void read_invalidate(gpb_client *c, int *seen)
{
	for (int i = 0; i < 500 && !*seen; i++) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 20) == 1)
			GPB(gpb_dispatch(c));
	}
	CHECK(*seen == 1);
	*seen = 0;
}

static unsigned open_now(void)
{
	struct gpb_mapping_stats st;
	GPB(gpb_mapping_stats(&st));
	return (unsigned)st.open_now;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	gt_cuda_context(0);
	struct gt_daemon d;
	const char *extra[] = {"--slab-size", "64MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	gpb_client *c = gt_connect(&d, "gpu-invalidate");
	gpb_client *admin = gt_connect(&d, "gpu-invalidate-admin");
	uint64_t inst = gt_register(c, 0);
	struct gpb_pool_stats ps;
	struct gpb_allocation a;
	int seen = 0;
	gpb_set_event_callback(c, on_event, &seen);

	size_t free0 = mem_free();
	GPB(gpb_alloc(c, inst, 1 << 20, 0, &a));
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0x5a, a.size));
	CU(cu.CtxSynchronize());
	CHECK(open_now() == 1);
	CHECK(free0 - mem_free() >= SLAB - TOLERANCE);

	/* set_allocator replaces the pool, which would give its slabs back
	 * to the driver: the one the client has open stays. */
	GPB(gpb_set_allocator(admin, "direct"));
	CHECK(gt_fake_violations() == 0);
	CHECK(free0 - mem_free() >= SLAB - TOLERANCE);
	CHECK(gt_status_used(admin) == 0);
	read_invalidate(c, &seen);
	CHECK(open_now() == 0);
	/* A request behind the library's invalidate_done: answered after it. */
	GPB(gpb_stats(c, 0, &ps));
	CHECK(gt_fake_violations() == 0);
	CHECK(free0 - mem_free() < TOLERANCE);

	/* invalidate_all with direct, where an emptied slab goes back to the
	 * driver at once unless it is kept. */
	GPB(gpb_alloc(c, inst, 1 << 20, 0, &a));
	CHECK(open_now() == 1);
	GPB(gpb_invalidate_all(admin));
	CHECK(gt_fake_violations() == 0);
	read_invalidate(c, &seen);
	CHECK(open_now() == 0);
	GPB(gpb_stats(c, 0, &ps));
	CHECK(ps.slabs == 0 && ps.reserved == 0);
	CHECK(gt_fake_violations() == 0);

	/* The client is given memory again, in a slab it opens anew. */
	GPB(gpb_alloc(c, inst, 1 << 20, 0, &a));
	CHECK(open_now() == 1);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0x21, a.size));
	CU(cu.CtxSynchronize());

	/* One that never reads the event lets go when it disconnects (the
	 * library closes its mappings before the socket). */
	GPB(gpb_invalidate_all(admin));
	CHECK(gt_fake_violations() == 0);
	GPB(gpb_stats(admin, 0, &ps));
	CHECK(ps.slabs == 1);
	gpb_disconnect(c);
	gt_wait_slabs(admin, 0, 0);
	CHECK(gt_fake_violations() == 0);

	CHECK(gt_status_used(admin) == 0);
	gpb_disconnect(admin);
	gt_daemon_stop(&d);
	printf("ok: invalidate_all and set_allocator keep a slab until its client closed it\n");
	return 0;
}
