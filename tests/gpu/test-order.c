/*
 * test-order.c (gpu-order) - frees ordered after the work queued on the
 * memory (issue 15, finding 6).
 *
 * A stream is held shut by a host function (cuLaunchHostFunc) that waits
 * for a gate, and a memset is queued behind it on the allocation: on a GPU
 * the work is then certainly still queued when the free comes; the fake
 * driver runs queued work only at a synchronisation anyway. A helper thread
 * opens the gate after a while, as the device would finish in its time.
 *
 * - gpb_free of a block (leases, the default): it returns with the work
 *   still queued (no synchronize: issue 29), the block stays in use and its
 *   range is served to nobody until the stream has run (a blocking stream:
 *   the fence is on the legacy default stream).
 * - With GPUBROKER_FREE_SYNC=1 (and on a non-blocking stream, which that
 *   fence does not cover), gpb_free of an allocation in a slab that stays
 *   mapped: it returns only once the stream's work has run (cuStreamQuery
 *   says so), and the range, allocated again and written, is not
 *   overwritten by the late memset.
 * - gpb_free of a dedicated slab, which closes the mapping and lets the
 *   daemon free the memory: no close with work queued (the fake counts one
 *   as a violation).
 * - gpb_free of pinned host memory a queued copy reads: it is unmapped only
 *   after the copy ran.
 * - gpb_free_async: returns at once; the allocation stays (the daemon
 *   still counts it, the slab stays mapped, gpb_free of it is
 *   GPB_E_NOT_FOUND) while the stream is shut, however many calls are made;
 *   once the stream has run, the next call frees it, closing a dedicated
 *   slab without a violation.
 * - gpb_disconnect with a gpb_free_async still waiting: it waits for the
 *   stream before it unmaps.
 */
#include "gpu-common.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define SLAB  (8ull << 20)
#define SIZE  (1ull << 20)
#define LARGE (SLAB + SLAB / 2) /* a dedicated slab */

static atomic_int gate;

static void *open_gate_later(void *unused)
{
	(void)unused;
	struct timespec ts = {0, 200 * 1000000L};
	nanosleep(&ts, NULL);
	atomic_store(&gate, 1);
	return NULL;
}

/* Shuts @s and queues a memset of @n bytes at @ptr behind the gate. */
static void queue_behind_gate(CUstream s, void *ptr, size_t n, unsigned char value)
{
	atomic_store(&gate, 0);
	CU(cu.LaunchHostFunc(s, gt_wait_for_gate, &gate));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)ptr, value, n, s));
	CHECK(cu.StreamQuery(s) == CUDA_ERROR_NOT_READY);
}

static unsigned open_now(void)
{
	struct gpb_mapping_stats st;
	GPB(gpb_mapping_stats(&st));
	return (unsigned)st.open_now;
}

static void sync_frees(gpb_client *c, uint64_t inst, CUstream s)
{
	struct gpb_allocation keep, a, again, big;
	pthread_t t;
	unsigned char *buf = malloc(SIZE), *back = malloc(SIZE);
	CHECK(buf && back);

	GPB(gpb_alloc(c, inst, SIZE, 0, &keep)); /* keeps the slab mapped */
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	queue_behind_gate(s, a.ptr, SIZE, 0x5a);
	CHECK(pthread_create(&t, NULL, open_gate_later, NULL) == 0);
	GPB(gpb_free(c, a.id));
	if (cu.StreamQuery(s) != CUDA_SUCCESS)
		GT_FAIL("gpb_free returned with work still queued on the memory it freed");
	pthread_join(t, NULL);

	/* The range again, someone else's now: the old memset is done. */
	GPB(gpb_alloc(c, inst, SIZE, 0, &again));
	CHECK(again.slab == a.slab && again.offset == a.offset);
	gt_fill(buf, SIZE, 7);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)again.ptr, buf, SIZE));
	CU(cu.StreamSynchronize(s));
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)again.ptr, SIZE));
	CHECK(memcmp(buf, back, SIZE) == 0);
	GPB(gpb_free(c, again.id));

	/* A dedicated slab: its mapping is closed by the free. */
	GPB(gpb_alloc(c, inst, LARGE, 0, &big));
	queue_behind_gate(s, big.ptr, LARGE, 0x11);
	CHECK(pthread_create(&t, NULL, open_gate_later, NULL) == 0);
	GPB(gpb_free(c, big.id));
	CHECK(cu.StreamQuery(s) == CUDA_SUCCESS);
	pthread_join(t, NULL);
	CHECK(gt_fake_violations() == 0);

	/* Pinned host memory with a copy from it queued: not unmapped under
	 * the copy (the fake would read unmapped memory: a crash). */
	struct gpb_allocation host;
	GPB(gpb_alloc_host(c, inst, SIZE, GPB_HOST_PINNED, &host));
	memset(host.ptr, 0x77, SIZE);
	atomic_store(&gate, 0);
	CU(cu.LaunchHostFunc(s, gt_wait_for_gate, &gate));
	CU(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)keep.ptr, host.ptr, SIZE, s));
	CHECK(pthread_create(&t, NULL, open_gate_later, NULL) == 0);
	GPB(gpb_free(c, host.id));
	CHECK(cu.StreamQuery(s) == CUDA_SUCCESS);
	pthread_join(t, NULL);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)keep.ptr, SIZE));
	CHECK(back[0] == 0x77 && back[SIZE - 1] == 0x77);

	GPB(gpb_free(c, keep.id));
	free(buf);
	free(back);
}

/* What this process's allocations of @inst hold: the daemon charges a
 * lease whole (gpb_mem_info), of which this process uses in_use. */
static uint64_t held(gpb_client *c, uint64_t inst)
{
	struct gpb_mem_info m;
	GPB(gpb_mem_info(c, inst, &m));
	return gt_status_used(c) - m.leased + m.in_use;
}

static void async_frees(gpb_client *c, uint64_t inst, CUstream s)
{
	struct gpb_allocation keep, a, big;
	uint64_t used0;

	GPB(gpb_alloc(c, inst, SIZE, 0, &keep));
	used0 = held(c, inst);
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	GPB(gpb_alloc(c, inst, LARGE, 0, &big));
	CHECK(open_now() == 2);
	queue_behind_gate(s, a.ptr, SIZE, 0x33);
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)big.ptr, 0x44, LARGE, s));
	GPB(gpb_free_async(c, a.id, s));
	GPB(gpb_free_async(c, big.id, s));
	CHECK(gpb_free(c, a.id) == GPB_E_NOT_FOUND);
	CHECK(gpb_free_async(c, big.id, s) == GPB_E_NOT_FOUND);

	/* Not before the stream has run, however many calls come. */
	for (int i = 0; i < 5; i++) {
		CHECK(held(c, inst) == used0 + a.size + big.size);
		CHECK(open_now() == 2);
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	CHECK(cu.StreamQuery(s) == CUDA_ERROR_NOT_READY);

	/* The stream runs; the next call frees both. */
	atomic_store(&gate, 1);
	CU(cu.StreamSynchronize(s));
	CHECK(held(c, inst) == used0);
	CHECK(open_now() == 1);
	CHECK(gt_fake_violations() == 0);
	GPB(gpb_free(c, keep.id));
	CHECK(open_now() == 1); /* kept (issue 18) until let go */
	CHECK(gpb_release_kept(c) == 1);
	CHECK(open_now() == 0);
}

/*
 * The default since issue 29: a free stops nothing. On a blocking stream
 * (the fence gpb_free records on the legacy default stream comes after its
 * work), a block freed with a memset held behind the gate: gpb_free returns
 * with the work still queued, the block stays in use and its range goes to
 * nobody meanwhile (the next block is another), and once the stream has run
 * it is free again, with no late write on anyone's block.
 */
static void deferred_frees(const struct gt_daemon *d)
{
	gpb_client *c = gt_connect(d, "gpu-order-deferred");
	uint64_t inst = gt_register(c, 0);
	struct gpb_allocation keep, a, b;
	struct gpb_mem_info m;
	CUstream s;
	pthread_t t;
	unsigned char *buf = malloc(SIZE), *back = malloc(SIZE);
	CHECK(buf && back);

	CU(cu.StreamCreate(&s, 0));
	GPB(gpb_alloc(c, inst, SIZE, 0, &keep));
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	queue_behind_gate(s, a.ptr, SIZE, 0x5a);
	GPB(gpb_free(c, a.id));
	if (cu.StreamQuery(s) != CUDA_ERROR_NOT_READY)
		GT_FAIL("gpb_free waited for the work queued on the memory (GPUBROKER_FREE_SYNC "
		        "unset)");
	GPB(gpb_mem_info(c, inst, &m));
	CHECK(m.in_use == 2 * SIZE); /* a's block, held while its memset is queued */
	GPB(gpb_alloc(c, inst, SIZE, 0, &b));
	CHECK(b.ptr != a.ptr);
	/* A synchronous copy waits for the blocking streams: the gate opens
	 * meanwhile, the memset lands in a's range, not in b's. */
	CHECK(pthread_create(&t, NULL, open_gate_later, NULL) == 0);
	gt_fill(buf, SIZE, 7);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)b.ptr, buf, SIZE));
	pthread_join(t, NULL);
	CU(cu.StreamSynchronize(s));
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)b.ptr, SIZE));
	CHECK(memcmp(buf, back, SIZE) == 0);
	GPB(gpb_mem_info(c, inst, &m));
	CHECK(m.in_use == 2 * SIZE); /* keep and b: a's block went back */
	CHECK(gt_fake_violations() == 0);
	GPB(gpb_free(c, b.id));
	GPB(gpb_free(c, keep.id));
	gpb_disconnect(c);
	CU(cu.StreamDestroy(s));
	free(buf);
	free(back);
}

/* Disconnecting with a gpb_free_async waiting: the stream runs first. */
static void async_at_disconnect(const struct gt_daemon *d, CUstream s)
{
	gpb_client *c = gt_connect(d, "gpu-order-disconnect");
	struct gpb_allocation big;
	pthread_t t;

	GPB(gpb_alloc(c, gt_register(c, 0), LARGE, 0, &big));
	queue_behind_gate(s, big.ptr, LARGE, 0x55);
	GPB(gpb_free_async(c, big.id, s));
	CHECK(pthread_create(&t, NULL, open_gate_later, NULL) == 0);
	gpb_disconnect(c);
	CHECK(cu.StreamQuery(s) == CUDA_SUCCESS);
	pthread_join(t, NULL);
	CHECK(open_now() == 0);
	CHECK(gt_fake_violations() == 0);
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (!cu.LaunchHostFunc || !cu.MemsetD8Async || !cu.StreamQuery) {
		printf("SKIP: the driver lacks cuLaunchHostFunc, cuMemsetD8Async or "
		       "cuStreamQuery\n");
		return GT_SKIP;
	}
	gt_cuda_context(0);
	CUstream s;
	/* Non-blocking: the legacy stream's synchronous copies do not wait for it. */
	CU(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
	struct gt_daemon d;
	const char *extra[] = {"--slab-size", "8MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	/* gpb_free's waits (sync_frees) on a non-blocking stream, which the
	 * default's fence on the legacy default stream does not cover: the
	 * connection that keeps the synchronize (gpubroker.h, gpb_free). */
	setenv("GPUBROKER_FREE_SYNC", "1", 1);
	gpb_client *c = gt_connect(&d, "gpu-order");
	unsetenv("GPUBROKER_FREE_SYNC");
	uint64_t inst = gt_register(c, 0);

	deferred_frees(&d);
	sync_frees(c, inst, s);
	async_frees(c, inst, s);
	async_at_disconnect(&d, s);

	/* async_at_disconnect's connection ended holding its allocation (its
	 * gpb_free_async was never sent): the daemon releases it when it
	 * closes that connection, in its own time. */
	for (int i = 0; i < 300 && gt_status_used(c) != 0; i++)
		poll(NULL, 0, 10);
	CHECK(gt_status_used(c) == 0);
	gpb_disconnect(c);
	CU(cu.StreamDestroy(s));
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: frees wait for the work queued on the memory; gpb_free_async frees once "
	       "the stream has run\n");
	return 0;
}
