/*
 * test-handles.c (gpu-handles) - IPC handles are opened once per slab per
 * process, and closed exactly once.
 *
 * 1000 live allocations in one slab cost one cuIpcOpenMemHandle; a second
 * connection of the same process handed the same slab opens nothing more;
 * 1000 alloc+free cycles while the slab stays held open nothing; the
 * mapping closes once, when the process's last allocation there goes, or at
 * disconnect. Prints the alloc and alloc+free times and, for reference, what
 * alloc/free ping-pong with nothing else in the slab costs in opens (the
 * mapping is closed with the last allocation: see docs/cuda.md).
 */
#include "gpu-common.h"

#include <string.h>

#define N 1000

static void stats(struct gpb_mapping_stats *st)
{
	GPB(gpb_mapping_stats(st));
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL); /* 64 MiB slabs */
	gpb_client *c = gt_connect(&d, "gpu-handles");
	uint64_t inst = gt_register(c, 0);
	static struct gpb_allocation a[N];
	struct gpb_mapping_stats s0, s;
	stats(&s0);

	/* The first allocation makes the slab (cuMemAlloc, scrub, IPC handle)
	 * and opens it here: timed apart from the others. */
	double t0 = gt_now_ms();
	GPB(gpb_alloc(c, inst, 4096, 0, &a[0]));
	double t_first = gt_now_ms() - t0;
	t0 = gt_now_ms();
	for (int i = 1; i < N; i++)
		GPB(gpb_alloc(c, inst, 4096, 0, &a[i]));
	double t_alloc = gt_now_ms() - t0;
	for (int i = 1; i < N; i++) {
		CHECK(a[i].slab == a[0].slab);
		CHECK((char *)a[i].ptr - a[i].offset == (char *)a[0].ptr - a[0].offset);
	}
	stats(&s);
	CHECK(s.opens - s0.opens == 1 && s.open_now == 1);

	/* Another connection of this process, same slab: no second open, and
	 * the same address for the same bytes. */
	gpb_client *c2 = gt_connect(&d, "gpu-handles-2");
	uint64_t inst2 = gt_register(c2, 0);
	struct gpb_allocation b;
	GPB(gpb_alloc(c2, inst2, 4096, 0, &b));
	CHECK(b.slab == a[0].slab);
	CHECK((char *)b.ptr - b.offset == (char *)a[0].ptr - a[0].offset);
	stats(&s);
	CHECK(s.opens - s0.opens == 1 && s.open_now == 1);

	/* Steady state: the slab stays held, alloc+free opens nothing. */
	t0 = gt_now_ms();
	for (int i = 0; i < N; i++) {
		struct gpb_allocation x;
		GPB(gpb_alloc(c, inst, 65536, 0, &x));
		GPB(gpb_free(c, x.id));
	}
	double t_cycle = gt_now_ms() - t0;
	stats(&s);
	printf("steady state: %llu handle opens per %d alloc+free\n",
	       (unsigned long long)(s.opens - s0.opens - 1), N);
	CHECK(s.opens - s0.opens == 1);

	/* Connection 1 lets go of the slab; connection 2 still holds it. */
	for (int i = 0; i < N; i++)
		GPB(gpb_free(c, a[i].id));
	stats(&s);
	CHECK(s.open_now == 1 && s.closes == s0.closes);
	GPB(gpb_free(c2, b.id));
	/* Both connections keep the slab mapped, empty, until they let go. */
	stats(&s);
	CHECK(s.open_now == 1 && s.closes == s0.closes);
	CHECK(gpb_release_kept(c) == 1);
	CHECK(gpb_release_kept(c2) == 1);
	stats(&s);
	CHECK(s.open_now == 0 && s.closes - s0.closes == 1);
	CHECK(gt_fake_violations() == 0);

	/* Ping-pong with nothing else in the slab: the first alloc opens it,
	 * and the slab stays mapped (kept) across the frees: no more opens. */
	struct gpb_mapping_stats p0;
	stats(&p0);
	t0 = gt_now_ms();
	for (int i = 0; i < 100; i++) {
		struct gpb_allocation x;
		GPB(gpb_alloc(c, inst, 4096, 0, &x));
		GPB(gpb_free(c, x.id));
	}
	double t_pingpong = gt_now_ms() - t0;
	stats(&s);
	CHECK(s.opens - p0.opens == 1 && s.closes == p0.closes && s.open_now == 1);
	printf("ping-pong with an otherwise empty slab: %llu opens per 100 alloc+free, "
	       "%.1f us per cycle\n",
	       (unsigned long long)(s.opens - p0.opens), t_pingpong * 10.0);

	/* Disconnect closes what is still open, exactly once. */
	GPB(gpb_alloc(c, inst, 4096, 0, &b));
	stats(&p0);
	CHECK(p0.open_now == 1);
	gpb_disconnect(c);
	stats(&s);
	CHECK(s.open_now == 0 && s.closes - p0.closes == 1);
	gpb_disconnect(c2);

	printf("first alloc (new 64 MiB slab, opened here): %.1f ms; alloc (4 KiB, slab "
	       "held): %.1f us; alloc+free (64 KiB, slab held): %.1f us\n",
	       t_first, t_alloc * 1000.0 / (N - 1), t_cycle * 1000.0 / N);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: one open per slab per process, one close\n");
	return 0;
}
