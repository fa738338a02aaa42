/*
 * test-share.c (gpu-share) - sharing by name on the cuda backend.
 *
 * A client allocates a whole slab, writes it with cuMemcpyHtoD and exports
 * it. Another process opens it by name (its own IPC mapping of the slab),
 * reads the bytes with cuMemcpyDtoH and writes its own. Then a second
 * connection of this process opens it, the exporter frees it (an orphan:
 * the memory stays for the opener) and the opener still reads it; its
 * detach frees the slab, which the library must have closed first (the fake
 * driver counts a free under an open mapping as a violation).
 */
#include "gpu-common.h"

#include <string.h>

#define SLAB (8ull << 20)

/* The second process: opens name, checks pattern 1, writes pattern 2. */
static int opener(const char *socket, const char *name)
{
	struct gpb_allocation a;
	gpb_client *c = NULL;

	GPB(gpb_connect(socket, "gpu-share-opener", &c));
	GPB(gpb_open_shared(c, name, &a));
	CHECK(a.size == SLAB);
	gt_cuda_context(0);
	gt_expect_and_write(a.ptr, SLAB, 1, 2);
	CHECK(gpb_open_shared(c, "no-such-name", &a) == GPB_E_NOT_FOUND);
	GPB(gpb_detach(c, a.id));
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
	gpb_client *c = gt_connect(&d, "gpu-share");
	uint64_t inst = gt_register(c, 0);

	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, SLAB, 0, &a));
	unsigned char *buf = malloc(SLAB), *back = malloc(SLAB);
	CHECK(buf && back);
	gt_fill(buf, SLAB, 1);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, SLAB));
	CU(cu.CtxSynchronize());
	GPB(gpb_export(c, a.id, "frame", -1));

	char *args[] = {"opener", d.socket, "frame", NULL};
	CHECK(gt_wait(gt_spawn_self(args, NULL)) == 0);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)a.ptr, SLAB));
	gt_fill(buf, SLAB, 2);
	CHECK(memcmp(buf, back, SLAB) == 0);

	/* Freed by the exporter while open: the opener keeps the bytes. */
	gpb_client *o = gt_connect(&d, "gpu-share-second");
	struct gpb_allocation b;
	GPB(gpb_open_shared(o, "frame", &b));
	GPB(gpb_free(c, a.id));
	CHECK(gpb_open_shared(c, "frame", &a) == GPB_E_NOT_FOUND);
	CHECK(gt_status_used(o) == SLAB);
	memset(back, 0, SLAB);
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)b.ptr, SLAB));
	CHECK(memcmp(buf, back, SLAB) == 0);
	GPB(gpb_detach(o, b.id));
	CHECK(gt_status_used(o) == 0);

	struct gpb_mapping_stats st;
	CHECK(gpb_release_kept(c) >= 0); /* kept (issue 18) until let go */
	CHECK(gpb_release_kept(o) >= 0);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 0);
	gpb_disconnect(o);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	free(buf);
	free(back);
	printf("ok: export, open in another process, orphan read after the exporter's free\n");
	return 0;
}
