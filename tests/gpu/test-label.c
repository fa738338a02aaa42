/*
 * test-label.c (gpu-label) - free_label on the cuda backend closes before
 * the daemon frees.
 *
 * Queued arrays (allocate_queue, claim) are freed by label: one large
 * enough for a slab of its own, which the daemon gives back to the driver
 * as soon as it is freed, and a small one. The library must close each slab
 * the label empties before it sends free_label (the fake driver counts a
 * cuMemFree under an open mapping as a violation), and keep the others.
 */
#include "gpu-common.h"

#include <poll.h>
#include <string.h>

#include <cjson/cJSON.h>

#define SLAB      (8ull << 20)
#define BIG_ELEMS (3ull << 20) /* 12 MiB of floats: a dedicated slab */

struct ready {
	int seen;
	uint64_t big, small;
};

static void on_event(gpb_client *c, const char *name, const char *data, void *arg)
{
	struct ready *r = arg;
	(void)c;
	if (strcmp(name, "allocation_ready") != 0)
		return;
	cJSON *root = cJSON_Parse(data), *it;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "arrays"))
	{
		const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(it, "label"));
		const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(it, "id"));
		if (label && id && strcmp(label, "big") == 0)
			r->big = strtoull(id, NULL, 16);
		if (label && id && strcmp(label, "small") == 0)
			r->small = strtoull(id, NULL, 16);
	}
	cJSON_Delete(root);
	r->seen++;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	gt_cuda_context(0);
	struct gt_daemon d;
	const char *extra[] = {"--slab-size", "8MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	gpb_client *c = gt_connect(&d, "gpu-label");
	uint64_t inst = gt_register(c, 0);

	struct gpb_array_request reqs[2] = {
	    {.label = "big", .shape = {BIG_ELEMS}, .ndim = 1, .elem_size = 4, .unchunkable = 1},
	    {.label = "small", .shape = {1024}, .ndim = 1, .elem_size = 8, .unchunkable = 1},
	};
	struct ready r = {0};
	gpb_set_event_callback(c, on_event, &r);
	CHECK(gpb_queue_request(c, inst, reqs, 2) == 2);
	GPB(gpb_allocate_queue(c, inst, NULL));
	for (int i = 0; i < 500 && !r.seen; i++) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 20) == 1)
			GPB(gpb_dispatch(c));
	}
	CHECK(r.seen == 1 && r.big && r.small);

	struct gpb_allocation big, small;
	GPB(gpb_claim(c, r.big, &big));
	GPB(gpb_claim(c, r.small, &small));
	CHECK(big.size == BIG_ELEMS * 4 && big.slab != small.slab);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)big.ptr, 0x5a, big.size));
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)small.ptr, 0x21, small.size));
	CU(cu.CtxSynchronize());

	struct gpb_mapping_stats st;
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 2);
	CHECK(gt_fake_violations() == 0);
	/* The big array's dedicated slab goes back to the driver at once. */
	CHECK(gpb_free_label(c, 0, "big") == 1);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 1);
	CHECK(gt_fake_violations() == 0);
	/* The other slab was not closed: its memory is still usable. */
	unsigned char byte = 0;
	CU(cu.MemcpyDtoH(&byte, (CUdeviceptr)(uintptr_t)small.ptr + small.size - 1, 1));
	CHECK(byte == 0x21);
	/* Of another instance: nothing freed, nothing closed. */
	CHECK(gpb_free_label(c, inst + 1000, "small") == GPB_E_NOT_FOUND);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 1);
	CHECK(gpb_free_label(c, inst, "small") == 1);
	/* Kept mapped (issue 18) until let go: closed before the daemon may
	 * free it. */
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 1);
	CHECK(gpb_release_kept(c) == 1);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 0);

	CHECK(gt_status_used(c) == 0);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: free_label closes the slabs it empties before the daemon frees them\n");
	return 0;
}
