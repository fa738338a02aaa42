/*
 * test-capacity.c (gpu-capacity) - what the broker promises is there
 * (issue 15, finding 7).
 *
 * Every process with a context on a device pays for it in device memory. A
 * child makes one, and the free memory this process sees before and with it
 * gives the per-process context overhead (printed: on a GPU this is the
 * figure the default `reserve` is sized by: 523 MiB on an H100; the fake's
 * is FAKECUDA_CONTEXT_OVERHEAD, default 32 MiB, and cuda-fake-capacity-h100
 * runs it with the H100's figures: 523 MiB per context on 81079 MiB), and
 * how many client contexts the default reserve covers.
 *
 * `status` shows per device the total, what was in use when the daemon
 * started (this process's context and the daemon's own among it), the
 * reserve (the default: 2 GiB, at most a quarter of the device) and the
 * capacity, which is the total less both. With --reserve given, a client
 * (whose context is in the in-use figure) allocates the whole capacity in
 * 64 MiB requests: every one succeeds, and the next is refused by the
 * policy. Before the fix the capacity was the total, and the device ran out
 * before the broker's promise did.
 */
#include "gpu-legacy.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (64ull << 20)

static size_t mem_free(void)
{
	size_t free_bytes, total;
	gt_mem_info(&free_bytes, &total);
	return free_bytes;
}

static int context_holder(void)
{
	gt_cuda_context(0);
	CU(cu.CtxSynchronize());
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* The device memory another process's context takes. */
static size_t context_overhead(void)
{
	char line[64];
	int out;
	size_t before = mem_free();
	char *args[] = {"context", NULL};
	pid_t pid = gt_spawn_self(args, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strcmp(line, "ready") == 0);
	size_t with = mem_free();
	kill(pid, SIGKILL);
	gt_wait(pid);
	close(out);
	return before > with ? before - with : 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 2 && strcmp(argv[1], "context") == 0)
		return context_holder();

	gt_cuda_context(0);
	size_t overhead = context_overhead();
	printf("a process's context takes %zu MiB of device 0\n", overhead >> 20);
	if (gt_fake()) {
		const char *v = getenv("FAKECUDA_CONTEXT_OVERHEAD");
		CHECK(overhead == (v ? strtoull(v, NULL, 10) : (32u << 20)));
	}

	/* The default reserve. */
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	size_t free_now, total;
	gt_mem_info(&free_now, &total);
	gpb_client *c = gt_connect(&d, "gpu-capacity");
	uint64_t st_total = gl_status_device_u64(c, 0, "total");
	uint64_t in_use = gl_status_device_u64(c, 0, "in_use_at_start");
	uint64_t reserve = gl_status_device_u64(c, 0, "reserve");
	uint64_t capacity = gl_status_device_u64(c, 0, "capacity");
	printf("status: total %llu MiB, in use at start %llu MiB, reserve %llu MiB, capacity "
	       "%llu MiB\n",
	       (unsigned long long)(st_total >> 20), (unsigned long long)(in_use >> 20),
	       (unsigned long long)(reserve >> 20), (unsigned long long)(capacity >> 20));
	CHECK(st_total == total);
	CHECK(reserve == (total / 4 < (2ull << 30) ? total / 4 : (2ull << 30)));
	/* Whole 2 MiB units: the odd rest of the device is kept out too. */
	CHECK(capacity == ((total - in_use - reserve) & ~((2ull << 20) - 1)));
	/* The clients' contexts come out of the reserve: past this many, a
	 * client that fills the capacity leaves the next context no room. */
	printf("the default reserve covers %llu client contexts of %zu MiB\n",
	       overhead ? (unsigned long long)(reserve / overhead) : 0ull, overhead >> 20);
	/* Sized by the H100's 523 MiB: three clients' contexts, on a device
	 * large enough that the quarter bound does not apply. */
	if (overhead && total / 4 >= (2ull << 30))
		CHECK(reserve / overhead >= 3);
	/* This process's context and the daemon's at least. */
	if (gt_fake())
		CHECK(in_use == total - free_now);
	else
		CHECK(in_use >= 2 * overhead - overhead / 4);
	gpb_disconnect(c);
	gt_daemon_stop(&d);

	/* The fake's device memory is this machine's: a device much larger
	 * than 4 GiB (the H100's figures) is not filled. */
	if (gt_fake() && total > (4ull << 30)) {
		printf("ok: capacity is the total less what was in use and the reserve (%zu MiB "
		       "device not filled on the fake)\n",
		       total >> 20);
		return 0;
	}
	/* A reserve given: the whole capacity can be had, not a byte more. */
	const char *extra[] = {"--reserve", gt_fake() ? "64MiB" : "512MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	c = gt_connect(&d, "gpu-capacity-fill");
	reserve = gl_status_device_u64(c, 0, "reserve");
	capacity = gl_status_device_u64(c, 0, "capacity");
	CHECK(reserve == (gt_fake() ? 64ull << 20 : 512ull << 20));
	uint64_t inst = gt_register(c, 0), got = 0;
	struct gpb_allocation a;
	while (got < capacity) {
		uint64_t want = capacity - got < CHUNK ? capacity - got : CHUNK;
		int rc = gpb_alloc(c, inst, want, 0, &a);
		if (rc < 0)
			GT_FAIL("after %llu of %llu MiB: %s", (unsigned long long)(got >> 20),
			        (unsigned long long)(capacity >> 20), gpb_last_error());
		got += a.size;
	}
	CHECK(gpb_alloc(c, inst, 2u << 20, 0, &a) == GPB_E_OUT_OF_MEMORY);
	printf("allocated the whole capacity, %llu MiB, in %llu MiB requests\n",
	       (unsigned long long)(got >> 20), (unsigned long long)(CHUNK >> 20));
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: capacity is the total less what was in use and the reserve\n");
	return 0;
}
