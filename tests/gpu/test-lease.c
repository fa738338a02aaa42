/*
 * test-lease.c (gpu-lease) - allocation through leases on the cuda path
 * (issue 27), the library's default.
 *
 * - Many blocks from one lease with no daemon request (the daemon's
 *   gpubroker_requests_total does not move), each a pointer inside the
 *   lease's mapping of its slab (cuMemGetAddressRange), scrubbed, written
 *   with the driver and read back through the library, in a lease of the
 *   process's own figures (gpb_mem_info: leased, in_use, leases).
 * - A free waits for the work queued on the block before the range is
 *   served again (the fake runs queued work only at a synchronisation:
 *   a memset queued on a stream on the freed block lands before the next
 *   block there is written, not over it later).
 * - The lease returned (gpb_release_kept: nothing in it) leaves the daemon
 *   charging nothing; the next alloc leases again and its memory works.
 * - Exported by name (the block carved), another process opens it, reads
 *   the bytes and writes its own.
 * - fork: the child's copy of the parent's client refuses, its own
 *   connection leases afresh (on the fake its bytes read back); the
 *   parent's blocks, bytes and lease are intact afterwards.
 */
#include "gpu-common.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N     200
#define BLOCK 4096

/* The daemon's requests answered so far (every method and result). */
static uint64_t requests(gpb_client *c)
{
	char *m = NULL;
	uint64_t n = 0;
	GPB(gpb_request(c, "metrics", NULL, &m));
	for (const char *p = m; (p = strstr(p, "gpubroker_requests_total{"));) {
		p = strstr(p, "} ");
		CHECK(p != NULL);
		p += 2;
		n += strtoull(p, NULL, 10);
	}
	gpb_string_free(m);
	return n;
}

static struct gpb_mem_info info(gpb_client *c, uint64_t inst)
{
	struct gpb_mem_info m;
	GPB(gpb_mem_info(c, inst, &m));
	return m;
}

/* Writes pattern @seed to @a with the driver, reads it back through the
 * library. */
static void write_read(const struct gpb_allocation *a, unsigned seed)
{
	unsigned char want[BLOCK], back[BLOCK];
	gt_fill(want, BLOCK, seed);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a->ptr, want, BLOCK));
	memset(back, 0, BLOCK);
	GPB(gpb_copy_from_device(back, a->ptr, BLOCK, NULL));
	CU(cu.CtxSynchronize());
	CHECK(memcmp(want, back, BLOCK) == 0);
}

static void expect_bytes(const struct gpb_allocation *a, unsigned seed)
{
	unsigned char want[BLOCK], back[BLOCK];
	gt_fill(want, BLOCK, seed);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)a->ptr, BLOCK));
	CHECK(memcmp(want, back, BLOCK) == 0);
}

/* Another process: opens @name, checks pattern 1, writes pattern 2. */
static int opener(const char *socket, const char *name)
{
	gpb_client *c = NULL;
	struct gpb_allocation a;
	GPB(gpb_connect(socket, "gpu-lease-opener", &c));
	GPB(gpb_open_shared(c, name, &a));
	gt_cuda_context(0);
	gt_expect_and_write(a.ptr, BLOCK, 1, 2);
	GPB(gpb_detach(c, a.id));
	gpb_disconnect(c);
	return 0;
}

static int child(const struct gt_daemon *d, gpb_client *parent, uint64_t inst,
                 const struct gpb_allocation *pa)
{
	struct gpb_allocation x;
	CHECK(gpb_alloc(parent, inst, BLOCK, 0, &x) == GPB_E_INVALID);
	CHECK(gpb_free(parent, pa->id) == GPB_E_INVALID);
	gpb_client *c = gt_connect(d, "gpu-lease-child");
	uint64_t ci = gt_register(c, 0);
	CHECK(info(c, ci).leases == 0);
	/* The parent's client: the child's copy freed, nothing said. */
	gpb_disconnect(parent);
	int rc = gpb_alloc(c, ci, BLOCK, 0, &x);
	if (!gt_fake()) { /* CUDA does not support a child of a process that used it */
		printf("a forked child's allocation: %s\n", rc < 0 ? gpb_strerror(rc) : "ok");
		return 0;
	}
	GPB(rc);
	CHECK(x.id >> 48 == 0x10ca);
	CHECK(info(c, ci).leases == 1);
	gt_cuda_context(0);
	write_read(&x, 9);
	GPB(gpb_free(c, x.id));
	gpb_disconnect(c);
	return 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 4 && strcmp(argv[1], "opener") == 0)
		return opener(argv[2], argv[3]);
	gt_cuda_context(0);
	struct gt_daemon d;
	const char *extra[] = {"--slab-size", "8MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	gpb_client *c = gt_connect(&d, "gpu-lease");
	uint64_t inst = gt_register(c, 0);
	static struct gpb_allocation a[N];

	/* The first block leases; the others come from the lease. */
	GPB(gpb_alloc(c, inst, BLOCK, 0, &a[0]));
	uint64_t r0 = requests(c);
	for (int i = 1; i < N; i++)
		GPB(gpb_alloc(c, inst, BLOCK, 0, &a[i]));
	struct gpb_mem_info m = info(c, inst);
	CHECK(m.leases == 1 && m.leased >= N * BLOCK && m.in_use == N * BLOCK);
	CHECK(m.used == m.leased);
	for (int i = 0; i < N; i++) {
		CHECK(a[i].id >> 48 == 0x10ca); /* a local id (gpubroker.h) */
		CHECK(a[i].slab == a[0].slab);
		CUdeviceptr base = 0;
		size_t range = 0;
		CU(cu.MemGetAddressRange(&base, &range, (CUdeviceptr)(uintptr_t)a[i].ptr));
		CHECK(base + a[i].offset == (CUdeviceptr)(uintptr_t)a[i].ptr);
		unsigned char z[BLOCK], zero[BLOCK] = {0};
		CU(cu.MemcpyDtoH(z, (CUdeviceptr)(uintptr_t)a[i].ptr, BLOCK));
		CHECK(memcmp(z, zero, BLOCK) == 0);
		write_read(&a[i], 100u + (unsigned)i);
	}
	for (int i = 0; i < N; i++)
		expect_bytes(&a[i], 100u + (unsigned)i);
	for (int i = 1; i < N; i++)
		GPB(gpb_free(c, a[i].id));
	/* alloc+free from the lease, no request (the first metrics request
	 * and gpb_mem_info aside). */
	for (int i = 0; i < 1000; i++) {
		struct gpb_allocation x;
		GPB(gpb_alloc(c, inst, 256u << (i % 9), 0, &x));
		GPB(gpb_free(c, x.id));
	}
	uint64_t r1 = requests(c);
	printf("requests for %d allocs and %d alloc+free in a lease: %llu\n", N - 1, 1000,
	       (unsigned long long)(r1 - r0 - 2));
	CHECK(r1 - r0 == 2);

	/* gpb_free stops nothing (issue 29): 1000 more alloc+free, with no
	 * cuCtxSynchronize, and no event made per free (the fences' events come
	 * back to the context's kept ones, made by the loop above). The counts
	 * are the fake's (0 on a GPU). */
	{
		uint64_t sync0 = gt_fake_calls("cuCtxSynchronize");
		uint64_t made0 = gt_fake_calls("cuEventCreate"),
		         rec0 = gt_fake_calls("cuEventRecord");
		for (int i = 0; i < 1000; i++) {
			struct gpb_allocation x;
			GPB(gpb_alloc(c, inst, 256u << (i % 9), 0, &x));
			GPB(gpb_free(c, x.id));
		}
		uint64_t syncs = gt_fake_calls("cuCtxSynchronize") - sync0;
		uint64_t made = gt_fake_calls("cuEventCreate") - made0;
		printf(
		    "1000 alloc+free (gpb_free): %llu cuCtxSynchronize, %llu cuEventCreate, %llu "
		    "cuEventRecord\n",
		    (unsigned long long)syncs, (unsigned long long)made,
		    (unsigned long long)(gt_fake_calls("cuEventRecord") - rec0));
		/* None made per free: the kept ones serve (a few more where the
		 * oldest fences answered late, a loaded machine; a pool that
		 * kept none would make one per free). */
		CHECK(syncs == 0 && made < 100);
	}

	/* Stream order (gpb_alloc_async, issue 29): a block of a stream's own
	 * leases freed on that stream is served again at once to the next
	 * allocation on it, with no event and no synchronize: the stream runs
	 * the old work on it before the new. */
	if (cu.MemsetD8Async) {
		CUstream s;
		struct gpb_allocation x, y;
		unsigned same = 0;
		CU(cu.StreamCreate(&s, 0));
		GPB(gpb_alloc_async(c, inst, BLOCK, 0, s, &x)); /* the stream's first lease */
		CHECK(x.id >> 48 == 0x10ca);
		GPB(gpb_free_async(c, x.id, s));
		uint64_t ev0 = gt_fake_calls("cuEventRecord") + gt_fake_calls("cuEventQuery") +
		               gt_fake_calls("cuEventCreate");
		uint64_t sync0 = gt_fake_calls("cuCtxSynchronize");
		for (int i = 0; i < 1000; i++) {
			GPB(gpb_alloc_async(c, inst, BLOCK, 0, s, &y));
			same += y.ptr == x.ptr;
			CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)y.ptr, (unsigned char)i, BLOCK,
			                    s));
			GPB(gpb_free_async(c, y.id, s));
		}
		uint64_t events = gt_fake_calls("cuEventRecord") + gt_fake_calls("cuEventQuery") +
		                  gt_fake_calls("cuEventCreate") - ev0;
		uint64_t syncs = gt_fake_calls("cuCtxSynchronize") - sync0;
		printf(
		    "1000 alloc+free on one stream: %llu cuEvent calls, %llu cuCtxSynchronize, the "
		    "same block %u times\n",
		    (unsigned long long)events, (unsigned long long)syncs, same);
		CHECK(events <= 2 && syncs == 0 && same == 1000);
		/* The last memset is what the block holds; nothing ran late. */
		unsigned char back[BLOCK];
		CU(cu.StreamSynchronize(s));
		CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)x.ptr, BLOCK));
		CHECK(back[0] == (unsigned char)999 && back[BLOCK - 1] == (unsigned char)999);
		CHECK(gt_fake_violations() == 0);
		/* Freed with gpb_free: behind a fence on its stream. */
		GPB(gpb_alloc_async(c, inst, BLOCK, 0, s, &y));
		CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)y.ptr, 1, BLOCK, s));
		GPB(gpb_free(c, y.id));
		GPB(gpb_alloc_async(c, inst, BLOCK, 0, s, &x));
		CHECK(x.ptr != y.ptr || !gt_fake());
		GPB(gpb_free_async(c, x.id, s));
		CU(cu.StreamSynchronize(s));
		CU(cu.StreamDestroy(s));
		/* The stream's lease, wholly free, goes back (as it would
		 * when idle): the instance has its first lease alone again. */
		CHECK(gpb_release_kept(c) >= 0);
		CHECK(info(c, inst).leases == 1);
	}

	/* A free stops nothing (issue 29): the block it frees is served again
	 * only once the work queued on it has run. A memset queued on a
	 * blocking stream (the fake runs it only at a synchronisation): the
	 * free returns with it queued, the block stays in use, the next block
	 * of its size is another, and after the application's synchronize it
	 * is free again. */
	if (cu.MemsetD8Async && cu.StreamQuery) {
		struct gpb_allocation q, again;
		CUstream s;
		CU(cu.StreamCreate(&s, 0));
		GPB(gpb_alloc(c, inst, BLOCK, 0, &q));
		uint64_t in_use = info(c, inst).in_use;
		CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)q.ptr, 0x5a, BLOCK, s));
		GPB(gpb_free(c, q.id));
		CHECK(cu.StreamQuery(s) == CUDA_ERROR_NOT_READY || !gt_fake()); /* nothing waited */
		GPB(gpb_alloc(c, inst, BLOCK, 0, &again));
		CHECK(again.ptr != q.ptr); /* q is held until its fence has passed */
		write_read(&again, 7);
		CU(cu.CtxSynchronize());
		expect_bytes(&again, 7);
		CHECK(info(c, inst).in_use == in_use); /* again, not q: q went back */
		GPB(gpb_free(c, again.id));
		CU(cu.StreamDestroy(s));
	}
	/* GPUBROKER_FREE_SYNC=1 keeps the synchronize per free, which covers
	 * non-blocking streams too: the late memset lands before the range,
	 * served again at once, is written. */
	if (cu.MemsetD8Async) {
		struct gpb_allocation q, again;
		CUstream s;
		setenv("GPUBROKER_FREE_SYNC", "1", 1);
		gpb_client *cs = gt_connect(&d, "gpu-lease-sync");
		unsetenv("GPUBROKER_FREE_SYNC");
		uint64_t is = gt_register(cs, 0);
		/* Non-blocking: the synchronous copies do not wait for it. */
		CU(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
		GPB(gpb_alloc(cs, is, BLOCK, 0, &q));
		CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)q.ptr, 0x5a, BLOCK, s));
		GPB(gpb_free(cs, q.id));
		GPB(gpb_alloc(cs, is, BLOCK, 0, &again));
		CHECK(again.ptr == q.ptr);
		write_read(&again, 7);
		CU(cu.CtxSynchronize());
		expect_bytes(&again, 7);
		GPB(gpb_free(cs, again.id));
		CU(cu.StreamDestroy(s));
		gpb_disconnect(cs);
	}

	/* Exported: carved, and another process opens it. */
	{
		unsigned char one[BLOCK];
		gt_fill(one, BLOCK, 1);
		CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a[0].ptr, one, BLOCK));
		CU(cu.CtxSynchronize());
	}
	GPB(gpb_export(c, a[0].id, "gpu-lease-a0", -1));
	char *args[] = {"opener", d.socket, "gpu-lease-a0", NULL};
	CHECK(gt_wait(gt_spawn_self(args, NULL)) == 0);
	expect_bytes(&a[0], 2);

	/* fork: the child starts afresh; the parent's lease is intact. */
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(child(&d, c, inst, &a[0]));
	CHECK(gt_wait(pid) == 0);
	expect_bytes(&a[0], 2);
	m = info(c, inst);
	CHECK(m.leases == 1 && m.in_use == BLOCK);

	/* Returned (nothing in it), then leased again. */
	GPB(gpb_free(c, a[0].id));
	CHECK(gpb_release_kept(c) >= 1);
	m = info(c, inst);
	CHECK(m.leases == 0 && m.leased == 0 && m.in_use == 0 && m.used == 0);
	CHECK(gt_status_used(c) == 0);
	struct gpb_allocation b;
	GPB(gpb_alloc(c, inst, BLOCK, 0, &b));
	CHECK(b.id >> 48 == 0x10ca);
	m = info(c, inst);
	CHECK(m.leases == 1 && m.in_use == BLOCK);
	write_read(&b, 3);
	GPB(gpb_free(c, b.id));
	CHECK(gpb_release_kept(c) >= 1);
	struct gpb_mapping_stats st;
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 0 && st.opens == st.closes);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: %d blocks and 1000 alloc+free in a lease with no request, data through the "
	       "mapping, a free after queued work, export, fork, return and lease again\n",
	       N);
	return 0;
}
