/*
 * test-capture.c (gpu-capture) - frees during stream capture (issue 29):
 * no free synchronizes or records an event where CUDA forbids it, and the
 * memory a graph uses is served to nobody while the graph lives.
 *
 * On the fake driver a capturing stream's work becomes graph nodes, run at
 * each launch, and what CUDA refuses in a capture (the legacy stream used
 * while a blocking stream captures, a synchronize, a query of an event
 * recorded in a capture) is refused, invalidates the capture and counts a
 * violation. On a GPU the same calls meet the driver's own rules.
 *
 * - Freed inside the capture, on the capturing stream (gpb_free_async, the
 *   CuPy and PyTorch bridges' free): the capture stays valid, the block is
 *   not served again, a launch of the graph writes its range and not the
 *   next block's; once the graph and its executable graph are destroyed
 *   the block goes back.
 * - gpb_free (the legacy stream, Numba's) while a blocking stream
 *   captures, of a lease's block, of a daemon allocation, and with
 *   GPUBROKER_FREE_SYNC=1 (a synchronize per free otherwise): the capture
 *   stays valid, the block comes back after it ends.
 * - Allocated inside the capture (gpb_alloc_async and the torch entry
 *   points), freed after it on the same stream: held until the graph is
 *   gone, where a free on the stream would otherwise serve it at once.
 * - A process killed (SIGKILL) with such frees outstanding: the daemon
 *   reclaims all it held.
 */
#include "gpu-common.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define SIZE (64u << 10)
#define BIG  (48u << 20) /* past what a lease serves (a quarter of a 64 MiB slab) */

static struct gpb_mem_info info(gpb_client *c, uint64_t inst)
{
	struct gpb_mem_info m;
	GPB(gpb_mem_info(c, inst, &m));
	return m;
}

static void need_capture_api(void)
{
	if (!cu.StreamBeginCapture || !cu.StreamEndCapture || !cu.GraphInstantiate ||
	    !cu.GraphLaunch || !cu.GraphExecDestroy || !cu.GraphDestroy || !cu.StreamIsCapturing ||
	    !cu.MemsetD8Async) {
		fprintf(stderr, "SKIP: the driver lacks the stream capture calls\n");
		exit(GT_SKIP);
	}
}

/* Ends @s's capture, which must still be valid, and instantiates it. */
static CUgraphExec end_capture(CUstream s, CUgraph *graph)
{
	CUgraphExec exec;
	CUstreamCaptureStatus st;

	CU(cu.StreamIsCapturing(s, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE); /* not invalidated by a free */
	CU(cu.StreamEndCapture(s, graph));
	CHECK(*graph != NULL);
	CU(cu.GraphInstantiate(&exec, *graph, 0));
	return exec;
}

/* The block's bytes, read back synchronously (the context's streams run). */
static void expect_bytes(const void *ptr, unsigned char value)
{
	static unsigned char back[SIZE];
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)ptr, SIZE));
	for (size_t i = 0; i < SIZE; i++)
		if (back[i] != value)
			GT_FAIL("byte %zu of %p is %#x, not %#x", i, ptr, back[i], value);
}

/* Destroys the graph; the held block goes back at a later look. */
static void graph_gone(gpb_client *c, uint64_t inst, CUgraphExec exec, CUgraph graph,
                       uint64_t in_use_after)
{
	CU(cu.GraphExecDestroy(exec));
	CU(cu.GraphDestroy(graph));
	for (int i = 0; i < 300 && info(c, inst).in_use != in_use_after; i++)
		poll(NULL, 0, 10);
	CHECK(info(c, inst).in_use == in_use_after);
}

static void free_in_capture(gpb_client *c, uint64_t inst, CUstream s)
{
	struct gpb_allocation a, b;
	CUgraphExec exec;
	CUgraph graph;

	GPB(gpb_alloc_async(c, inst, SIZE, 0, s, &a));
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0, SIZE));
	CU(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)a.ptr, 0x5a, SIZE, s));
	GPB(gpb_free_async(c, a.id, s));
	exec = end_capture(s, &graph);
	CHECK(gt_fake_violations() == 0);

	/* The next block of the stream is not a's, though a was freed on it. */
	GPB(gpb_alloc_async(c, inst, SIZE, 0, s, &b));
	CHECK(b.ptr != a.ptr);
	CHECK(info(c, inst).in_use == 2 * SIZE);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)b.ptr, 0x11, SIZE));
	CU(cu.GraphLaunch(exec, s));
	CU(cu.StreamSynchronize(s));
	expect_bytes(a.ptr, 0x5a); /* the graph wrote its block */
	expect_bytes(b.ptr, 0x11); /* and nobody else's */
	/* Launched again and destroyed at once: the launch holds the graph's
	 * memory until it has run (the fake runs it at a synchronize only). */
	CU(cu.GraphLaunch(exec, s));
	CU(cu.GraphExecDestroy(exec));
	CU(cu.GraphDestroy(graph));
	if (gt_fake()) {
		poll(NULL, 0, 150);
		CHECK(info(c, inst).in_use == 2 * SIZE);
	}
	CU(cu.StreamSynchronize(s));
	for (int i = 0; i < 300 && info(c, inst).in_use != SIZE; i++)
		poll(NULL, 0, 10);
	CHECK(info(c, inst).in_use == SIZE);
	expect_bytes(b.ptr, 0x11);
	GPB(gpb_free_async(c, b.id, s));
	CHECK(gt_fake_violations() == 0);
	printf("free inside a capture: held while the graph lived, then back\n");
}

static void legacy_free_in_capture(const struct gt_daemon *d, gpb_client *c, uint64_t inst,
                                   CUstream s)
{
	struct gpb_allocation x, y, big, x2;
	CUgraphExec exec;
	CUgraph graph;

	/* A client that waits for the context at each free, by choice. */
	setenv("GPUBROKER_FREE_SYNC", "1", 1);
	gpb_client *c2 = gt_connect(d, "gpu-capture-sync");
	unsetenv("GPUBROKER_FREE_SYNC");
	uint64_t inst2 = gt_register(c2, 0);

	GPB(gpb_alloc(c, inst, SIZE, 0, &x));
	GPB(gpb_alloc(c, inst, BIG, 0, &big)); /* the daemon's, not a lease's */
	GPB(gpb_alloc(c2, inst2, SIZE, 0, &x2));
	CU(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)x.ptr, 0x33, SIZE, s));
	GPB(gpb_free(c, x.id)); /* the legacy stream cannot be used now */
	GPB(gpb_free(c, big.id));
	GPB(gpb_free(c2, x2.id));
	GPB(gpb_alloc(c, inst, SIZE, 0, &y));
	CHECK(y.ptr != x.ptr);
	exec = end_capture(s, &graph);
	CHECK(gt_fake_violations() == 0);
	/* The capture over, x's free takes its event and passes. */
	for (int i = 0; i < 300 && info(c, inst).in_use != SIZE; i++)
		poll(NULL, 0, 10);
	CHECK(info(c, inst).in_use == SIZE);
	CU(cu.GraphExecDestroy(exec));
	CU(cu.GraphDestroy(graph));
	GPB(gpb_free(c, y.id));
	CHECK(gt_fake_violations() == 0);
	gpb_disconnect(c2);
	printf("gpb_free during a capture: the capture intact, the block back after it\n");
}

static void alloc_in_capture(gpb_client *c, uint64_t inst, CUstream s)
{
	struct gpb_allocation z, w;
	CUgraphExec exec;
	CUgraph graph;

	CU(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	GPB(gpb_alloc_async(c, inst, SIZE, 0, s, &z));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)z.ptr, 0x77, SIZE, s));
	/* PyTorch's entry points, inside the same capture. */
	void *t = gpb_torch_alloc(SIZE, 0, s);
	CHECK(t != NULL);
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)t, 0x66, SIZE, s));
	exec = end_capture(s, &graph);

	/* Freed after the capture on their stream: a free there would serve
	 * them again at once; the graph still writes them. */
	GPB(gpb_free_async(c, z.id, s));
	gpb_torch_free(t, SIZE, 0, s);
	GPB(gpb_alloc_async(c, inst, SIZE, 0, s, &w));
	CHECK(w.ptr != z.ptr && w.ptr != t);
	void *t2 = gpb_torch_alloc(SIZE, 0, s);
	CHECK(t2 != NULL && t2 != z.ptr && t2 != t);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)w.ptr, 0x22, SIZE));
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)t2, 0x23, SIZE));
	CU(cu.GraphLaunch(exec, s));
	CU(cu.StreamSynchronize(s));
	expect_bytes(z.ptr, 0x77);
	expect_bytes(t, 0x66);
	expect_bytes(w.ptr, 0x22);
	expect_bytes(t2, 0x23);
	gpb_torch_free(t2, SIZE, 0, s);
	graph_gone(c, inst, exec, graph, SIZE);
	GPB(gpb_free_async(c, w.id, s));
	CHECK(gt_fake_violations() == 0);
	printf("allocated inside a capture: held after its free until the graph was gone\n");
}

/* The child: frees behind a graph and behind an event, then SIGKILL. */
static int victim(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_register_opts opts = {.name = "gpu-capture-victim"};
	struct gpb_allocation a, b;
	uint64_t inst;
	CUstream s;
	CUgraph graph;

	gt_cuda_context(0);
	GPB(gpb_connect(socket, "gpu-capture-victim", &c));
	GPB(gpb_register(c, &opts, &inst));
	CU(cu.StreamCreate(&s, 0));
	GPB(gpb_alloc_async(c, inst, SIZE, 0, s, &a));
	GPB(gpb_alloc(c, inst, SIZE, 0, &b));
	CU(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)a.ptr, 1, SIZE, s));
	GPB(gpb_free_async(c, a.id, s));
	CU(cu.StreamEndCapture(s, &graph));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)b.ptr, 2, SIZE, s));
	GPB(gpb_free(c, b.id));
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	need_capture_api();
	if (argc == 3 && strcmp(argv[1], "victim") == 0)
		return victim(argv[2]);
	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	/* Wholly free leases go back soon: the end sees the daemon empty. */
	setenv("GPUBROKER_LEASE_IDLE_MS", "100", 1);
	setenv("GPUBROKER_SOCKET", d.socket, 1);
	gpb_client *c = gt_connect(&d, "gpu-capture");
	uint64_t inst = gt_register(c, 0);
	CUstream s;

	CU(cu.StreamCreate(&s, 0)); /* blocking: the legacy stream waits for it */
	free_in_capture(c, inst, s);
	legacy_free_in_capture(&d, c, inst, s);
	alloc_in_capture(c, inst, s);
	CU(cu.StreamSynchronize(s));

	int out;
	char line[64];
	char *args[] = {"victim", d.socket, NULL};
	pid_t pid = gt_spawn_self(args, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strncmp(line, "ready", 5) == 0);
	CHECK(kill(pid, SIGKILL) == 0);
	CHECK(gt_wait(pid) == 128 + SIGKILL);
	close(out);
	GPB(gpb_release_kept(c));
	for (int i = 0; i < 500 && gt_status_used(c) != 0; i++)
		poll(NULL, 0, 10);
	CHECK(gt_status_used(c) == 0);
	CHECK(gt_fake_violations() == 0);
	gpb_disconnect(c);
	CU(cu.StreamDestroy(s));
	gt_daemon_stop(&d);
	printf("ok: frees in a capture break no capture and keep the graph's memory\n");
	return 0;
}
