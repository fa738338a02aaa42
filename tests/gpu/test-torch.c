/*
 * test-torch.c (gpu-torch) - PyTorch's pluggable allocator entry points
 * (gpb_torch_alloc, gpb_torch_free, gpb_torch_free3, gpb_torch_mem_info),
 * called as PyTorch calls them, against the real daemon.
 *
 * - one lazily connected client and one instance per CUDA ordinal, named
 *   and grouped by the environment, on the daemon's device with that
 *   ordinal's UUID (two devices where there are two; the fake has two);
 * - the memory is usable device memory, and goes back with the free;
 * - frees in stream order (issue 29): a block freed on its stream is that
 *   stream's again at once, another stream's tensor gets another, and the
 *   work queued on the stream runs in its order, with no synchronize;
 * - a cap (active mode, $GPUBROKER_TORCH_PROPORTION) enforced as a NULL
 *   return with the reason in gpb_last_error(); a bad proportion likewise;
 * - what a process held is reclaimed when it exits without freeing;
 * - unknown pointers, NULL and size 0 are harmless; threads allocating and
 *   freeing at once (seeded; the seed is printed and taken from argv).
 */
#include "gpu-common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ull << 20)

static atomic_int gate;

static struct gpb_mem_info torch_info(int device, uint64_t *instance)
{
	struct gpb_mem_info m;
	GPB(gpb_torch_mem_info(device, instance, &m));
	return m;
}

/* What the allocations of the torch instance of @device hold: the daemon
 * charges a lease whole (@used), of which this process uses in_use. */
static uint64_t torch_held(int device)
{
	struct gpb_mem_info m = torch_info(device, NULL);
	return m.used - m.leased + m.in_use;
}

/* The instance's name, group and device index as the daemon lists it. */
static void check_listed(gpb_client *observer, uint64_t inst, int device)
{
	struct gpb_instance_info info;
	GPB(gpb_instance_info(observer, inst, &info));
	CHECK(strcmp(info.name, "torch-test") == 0);
	CHECK(strcmp(info.group, "torch") == 0);
	CHECK(info.device == device);
}

/* A child: allocates under a cap of a quarter, or with a bad proportion. */
static int role_cap(void)
{
	size_t total = 0;
	struct gpb_mem_info m;

	if (getenv("GPUBROKER_TORCH_PROPORTION")[0] == '2') {
		CHECK(gpb_torch_alloc(MiB, 0, NULL) == NULL);
		CHECK(strstr(gpb_last_error(), "GPUBROKER_TORCH_PROPORTION") != NULL);
		CHECK(gpb_torch_mem_info(0, NULL, &m) == GPB_E_INVALID);
		printf("refused\n");
		return 0;
	}
	GPB(gpb_torch_mem_info(0, NULL, &m));
	void *a = gpb_torch_alloc((ssize_t)(m.cap / 2), 0, NULL);
	CHECK(a != NULL);
	total += m.cap / 2;
	void *b = gpb_torch_alloc((ssize_t)(m.cap / 2 + MiB), 0, NULL);
	CHECK(b == NULL);
	printf("refused: %s\n", gpb_last_error());
	CHECK(strstr(gpb_last_error(), "quota exceeded") != NULL);
	/* Within the cap again: fine. */
	b = gpb_torch_alloc(MiB, 0, NULL);
	CHECK(b != NULL);
	printf("ready %zu\n", total);
	fflush(stdout);
	/* Exits holding both: the daemon takes them back. */
	return 0;
}

static void check_ordered_free(void)
{
	CUstream s, other;
	uint64_t inst;

	if (!cu.LaunchHostFunc || !cu.MemsetD8Async) {
		printf("no cuLaunchHostFunc: ordered free not checked\n");
		return;
	}
	CU(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU(cu.StreamCreate(&other, CU_STREAM_NON_BLOCKING));
	torch_info(0, &inst);
	uint64_t used0 = torch_held(0);
	void *p = gpb_torch_alloc(4 * MiB, 0, s);
	CHECK(p != NULL);
	CHECK(torch_held(0) == used0 + 4 * MiB);
	atomic_store(&gate, 0);
	CU(cu.LaunchHostFunc(s, gt_wait_for_gate, &gate));
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)p, 0x5a, 4 * MiB, s));
	uint64_t syncs = gt_fake_calls("cuCtxSynchronize");
	gpb_torch_free(p, 4 * MiB, 0, s);
	/* Stream order, as PyTorch's own allocator: free on its stream, the
	 * block is that stream's again at once, with the stream still shut
	 * and nothing synchronized; another stream's tensor gets another. */
	CHECK(torch_held(0) == used0);
	void *again = gpb_torch_alloc(4 * MiB, 0, s);
	void *elsewhere = gpb_torch_alloc(4 * MiB, 0, other);
	CHECK(again == p && elsewhere != NULL && elsewhere != p);
	CHECK(gt_fake_calls("cuCtxSynchronize") == syncs);
	CU(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)again, 0x77, 4 * MiB, s));
	atomic_store(&gate, 1);
	CU(cu.StreamSynchronize(s));
	unsigned char b[2];
	CU(cu.MemcpyDtoH(&b[0], (CUdeviceptr)(uintptr_t)again, 1));
	CU(cu.MemcpyDtoH(&b[1], (CUdeviceptr)(uintptr_t)again + 4 * MiB - 1, 1));
	CHECK(b[0] == 0x77 && b[1] == 0x77); /* the later tensor's, in stream order */
	gpb_torch_free(again, 4 * MiB, 0, s);
	gpb_torch_free(elsewhere, 4 * MiB, 0, other);
	CHECK(torch_held(0) == used0);
	CHECK(gt_fake_violations() == 0);
	CU(cu.StreamDestroy(s));
	CU(cu.StreamDestroy(other));
}

struct worker {
	unsigned seed;
	int device;
};

static void *churn(void *arg)
{
	struct worker *w = arg;
	void *held[16] = {0};
	ssize_t sizes[16] = {0};

	for (int i = 0; i < 400; i++) {
		int k = (int)(rand_r(&w->seed) % 16);
		if (held[k]) {
			gpb_torch_free(held[k], sizes[k], w->device, NULL);
			held[k] = NULL;
		} else {
			sizes[k] = (ssize_t)(1 + rand_r(&w->seed) % (256 * 1024));
			held[k] = gpb_torch_alloc(sizes[k], w->device, NULL);
			CHECK(held[k] != NULL);
		}
	}
	for (int k = 0; k < 16; k++)
		gpb_torch_free3(held[k], sizes[k], NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	/* Two fake devices (gt_fake() is known only after gt_require_gpu). */
	if (getenv("GPB_FAKE_CUDA"))
		setenv("FAKECUDA_DEVICES", "2", 0);
	gt_require_gpu(argc, argv);
	if (argc == 2 && strcmp(argv[1], "cap") == 0)
		return role_cap();
	unsigned seed = argc == 2 ? (unsigned)strtoul(argv[1], NULL, 10) : (unsigned)time(NULL);
	printf("seed %u (replay: %s %u)\n", seed, argv[0], seed);

	int ndev = 0;
	CU(cu.DeviceGetCount(&ndev));
	ndev = ndev > 2 ? 2 : ndev;
	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	setenv("GPUBROKER_SOCKET", d.socket, 1);
	setenv("GPUBROKER_TORCH_NAME", "torch-test", 1);
	setenv("GPUBROKER_TORCH_GROUP", "torch", 1);
	gpb_client *observer = gt_connect(&d, "gpu-torch-observer");
	uint64_t base = gt_status_used(observer);

	/* Harmless: size 0, NULL, a pointer that is not ours. */
	CHECK(gpb_torch_alloc(0, 0, NULL) == NULL);
	CHECK(gpb_torch_alloc(-1, 0, NULL) == NULL);
	gpb_torch_free(NULL, 0, 0, NULL);
	gpb_torch_free((void *)(uintptr_t)0x1000, 16, 0, NULL);
	CHECK(strstr(gpb_last_error(), "not from gpb_torch_alloc") != NULL);
	CHECK(gpb_torch_alloc(16, -1, NULL) == NULL);

	/* One instance per device, the memory usable and given back. */
	uint64_t inst[2] = {0, 0};
	void *p[2];
	for (int dev = 0; dev < ndev; dev++) {
		p[dev] = gpb_torch_alloc(3 * MiB, dev, NULL);
		CHECK(p[dev] != NULL);
		struct gpb_mem_info m = torch_info(dev, &inst[dev]);
		CHECK(m.used >= 3 * MiB);
		struct gpb_framework_stats fs;
		GPB(gpb_torch_stats(dev, &fs));
		CHECK(fs.allocated == 3 * MiB && fs.live == 1 && fs.reserved == m.used);
		check_listed(observer, inst[dev], dev);
		unsigned char buf[4096];
		gt_fill(buf, sizeof(buf), 7u + (unsigned)dev);
		CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)p[dev] + MiB, buf, sizeof(buf)));
		gt_expect_and_write((char *)p[dev] + MiB, sizeof(buf), 7u + (unsigned)dev, 9);
	}
	CHECK(ndev < 2 || inst[0] != inst[1]);
	void *again = gpb_torch_alloc(MiB, 0, NULL);
	uint64_t same;
	torch_info(0, &same);
	CHECK(again != NULL && same == inst[0]); /* the same instance, not a new one */
	gpb_torch_free(again, MiB, 0, NULL);
	gpb_torch_free(p[0], 3 * MiB, 0, NULL);
	if (ndev == 2)
		gpb_torch_free3(p[1], 3 * MiB, NULL); /* PyTorch 2.0-2.2 */
	for (int dev = 0; dev < ndev; dev++)
		CHECK(torch_held(dev) == 0);
	printf("ok: %d device(s), one instance each\n", ndev);

	check_ordered_free();
	printf("ok: frees ordered on the stream\n");

	/* CuPy's C functions (gpb_cupy_*): the same kind of allocator, a
	 * client and instance of their own; outside Python a refusal is NULL.
	 * Before the threads below: its client's service thread lives to the
	 * end, and made after them it would take a joined thread's cached
	 * stack, whose TLS memcheck then reports under that thread's creation
	 * (the suppression names lease_service_start's). */
	setenv("GPUBROKER_CUPY_NAME", "cupy-test", 1);
	CHECK(gpb_cupy_malloc(NULL, 0, 0) == NULL);
	CHECK(gpb_cupy_malloc((void *)1, 16, 0) == NULL);
	CHECK(strstr(gpb_last_error(), "param must be NULL") != NULL);
	void *cp = gpb_cupy_malloc(NULL, 2 * MiB, 0);
	CHECK(cp != NULL);
	uint64_t cinst = 0;
	struct gpb_mem_info cm;
	GPB(gpb_cupy_mem_info(0, &cinst, &cm));
	CHECK(cinst != 0 && cinst != inst[0] && cm.in_use == 2 * MiB);
	{
		struct gpb_instance_info info;
		GPB(gpb_instance_info(observer, cinst, &info));
		CHECK(strcmp(info.name, "cupy-test") == 0 && info.device == 0);
	}
	{
		unsigned char buf[4096];
		gt_fill(buf, sizeof(buf), 21);
		CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)cp, buf, sizeof(buf)));
		gt_expect_and_write(cp, sizeof(buf), 21, 22);
	}
	CHECK(gpb_cupy_malloc(NULL, cm.cap + MiB, 0) == NULL);
	CHECK(gpb_last_error()[0] != '\0');
	gpb_cupy_free(NULL, (void *)(uintptr_t)0x1000, 0);
	CHECK(strstr(gpb_last_error(), "not from gpb_cupy_malloc") != NULL);
	gpb_cupy_free(NULL, cp, 0);
	for (int i = 0; i < 300; i++) {
		GPB(gpb_cupy_mem_info(0, NULL, &cm));
		if (cm.in_use == 0)
			break;
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	CHECK(cm.in_use == 0);
	printf("ok: gpb_cupy_malloc and gpb_cupy_free\n");

	/* Threads at once, on every device. */
	pthread_t t[4];
	struct worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i].seed = seed + (unsigned)i;
		w[i].device = i % ndev;
		CHECK(pthread_create(&t[i], NULL, churn, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int dev = 0; dev < ndev; dev++)
		CHECK(torch_held(dev) == 0);
	printf("ok: 4 threads\n");

	/* A cap: active mode, a child with a quarter of device 0. */
	GPB(gpb_set_mode(observer, GPB_MODE_ACTIVE));
	char line[256];
	int out;
	char *cap[] = {"cap", NULL};
	setenv("GPUBROKER_TORCH_PROPORTION", "2", 1);
	pid_t pid = gt_spawn_self(cap, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strcmp(line, "refused") == 0);
	CHECK(gt_wait(pid) == 0);
	close(out);
	setenv("GPUBROKER_TORCH_PROPORTION", "0.25", 1);
	pid = gt_spawn_self(cap, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strncmp(line, "refused: ", 9) == 0);
	printf("child: %s\n", line);
	CHECK(gt_read_line(out, line, sizeof(line)) && strncmp(line, "ready ", 6) == 0);
	CHECK(gt_wait(pid) == 0);
	close(out);
	unsetenv("GPUBROKER_TORCH_PROPORTION");
	/* Reclaimed: the child exited holding memory. */
	for (int i = 0; i < 300 && gt_status_used(observer) != base; i++) {
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (gt_status_used(observer) != base)
		for (int dev = 0; dev < ndev; dev++) {
			struct gpb_mem_info m = torch_info(dev, NULL);
			printf("used %llu, base %llu; this process's device %d: used %llu, "
			       "leased %llu, in use %llu, leases %llu\n",
			       (unsigned long long)gt_status_used(observer),
			       (unsigned long long)base, dev, (unsigned long long)m.used,
			       (unsigned long long)m.leased, (unsigned long long)m.in_use,
			       (unsigned long long)m.leases);
		}
	CHECK(gt_status_used(observer) == base);
	printf("ok: cap enforced as NULL with the reason; reclaimed at exit\n");

	gpb_disconnect(observer);
	gt_daemon_stop(&d);
	return 0;
}
