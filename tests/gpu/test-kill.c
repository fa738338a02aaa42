/*
 * test-kill.c (gpu-kill) - a client killed with SIGKILL frees its memory.
 *
 * A child allocates 256 MiB through the daemon and writes it; a third
 * process (this one, which allocates nothing) sees the device's free memory
 * drop by at least that much in cuMemGetInfo. SIGKILL of the child: the
 * daemon sees the connection close and frees everything it held (status
 * used returns to 0), and cuMemGetInfo shows the memory back.
 */
#include "gpu-common.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#define SIZE      (256ull << 20)
#define TOLERANCE (32ull << 20) /* other processes on a shared GPU */

static int hog(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation a;
	struct gpb_register_opts opts = {.name = "gpu-kill-hog"};
	uint64_t inst;

	GPB(gpb_connect(socket, "gpu-kill-hog", &c));
	GPB(gpb_register(c, &opts, &inst));
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	gt_cuda_context(0);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0x5a, SIZE));
	CU(cu.CtxSynchronize());
	printf("ready %016llx\n", (unsigned long long)a.id);
	fflush(stdout);
	for (;;)
		pause();
}

static size_t mem_free(void)
{
	size_t free_bytes, total;
	gt_mem_info(&free_bytes, &total);
	return free_bytes;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 3 && strcmp(argv[1], "hog") == 0)
		return hog(argv[2]);

	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	size_t free0 = mem_free();

	int out;
	char line[128];
	char *args[] = {"hog", d.socket, NULL};
	pid_t pid = gt_spawn_self(args, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strncmp(line, "ready ", 6) == 0);
	size_t free1 = mem_free();
	printf("free before %zu MiB, with the child's 256 MiB %zu MiB\n", free0 >> 20, free1 >> 20);
	CHECK(free1 + SIZE <= free0);

	gpb_client *c = gt_connect(&d, "gpu-kill-observer");
	CHECK(gt_status_used(c) >= SIZE);
	CHECK(kill(pid, SIGKILL) == 0);
	CHECK(gt_wait(pid) == 128 + SIGKILL);
	close(out);

	bool released = false;
	for (int i = 0; i < 1000 && !released; i++) {
		released = gt_status_used(c) == 0;
		if (!released)
			usleep(10000);
	}
	CHECK(released);
	gpb_disconnect(c);

	size_t free2 = 0;
	for (int i = 0; i < 1000; i++) {
		free2 = mem_free();
		if (free2 + TOLERANCE >= free0)
			break;
		usleep(10000);
	}
	printf("free after SIGKILL %zu MiB\n", free2 >> 20);
	CHECK(free2 + TOLERANCE >= free0);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: SIGKILL of a client returned its 256 MiB\n");
	return 0;
}
