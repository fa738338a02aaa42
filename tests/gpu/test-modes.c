/*
 * test-modes.c (gpu-modes) - devices in compute modes that keep clients
 * off (issue 15, finding 8).
 *
 * The daemon holds each device's primary context for its whole life: on an
 * exclusive-process device no client could make its own, on a prohibited
 * one nobody can. Such devices are left out, and the log says why.
 *
 * Against the fake (FAKECUDA_COMPUTE_MODE): of three devices in modes
 * default, exclusive-process and prohibited the daemon serves only the
 * first, its log names both modes; with every device exclusive it refuses
 * to start. The fake itself refuses a second process's context on the
 * exclusive device. Before the fix the exclusive device was served with a
 * warning. On a GPU the modes are only printed: changing them needs
 * nvidia-smi -c as root on an idle machine, so the test skips.
 *
 * MPS (issue 25, item 4): under MPS the MPS server holds the device's one
 * context, and the daemon and its clients, all MPS clients of one control
 * daemon, each get one through it, exclusive-process or not (an H100 under
 * MPS, driver 580.159.04: CU_DEVICE_ATTRIBUTE_MPS_ENABLED read 1 and
 * test-gpu-vmm, -alloc, -kill passed). With FAKECUDA_MPS=1 an
 * exclusive-process device is served and a client maps, writes and reads
 * a slab of it; without MPS its refusal says how to set MPS up. Before the
 * fix the exclusive device was left out under MPS too, with a message that
 * suggested the very setup it refused.
 */
#include "gpu-legacy.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static int devices_served(gpb_client *c)
{
	char *json = NULL;
	GPB(gpb_request(c, "devices", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	int n = cJSON_GetArraySize(cJSON_GetObjectItem(r, "devices"));
	cJSON_Delete(r);
	return n;
}

/* Holds a context on device 1 (exclusive-process) until killed. */
static int holder(void) __attribute__((noreturn));
static int holder(void)
{
	gt_cuda_context(1);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* An MPS client of device 1 (exclusive-process): maps a slab of the
 * daemon's, finds it scrubbed, writes and reads it back. */
static int mps_client(void)
{
	struct gt_daemon d = {0};
	snprintf(d.socket, sizeof(d.socket), "%s", getenv("GT_MPS_SOCKET"));
	gt_cuda_context(1);
	gpb_client *c = gt_connect(&d, "gpu-modes-mps");
	struct gpb_allocation a;
	GPB(gpb_alloc(c, gt_register(c, 1), 1u << 20, 0, &a));
	static unsigned char buf[1u << 20];
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)a.ptr, sizeof(buf)));
	for (size_t i = 0; i < sizeof(buf); i++)
		CHECK(buf[i] == 0); /* scrubbed */
	memset(buf, 0x5a, sizeof(buf));
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, sizeof(buf)));
	memset(buf, 0, sizeof(buf));
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)a.ptr, sizeof(buf)));
	for (size_t i = 0; i < sizeof(buf); i++)
		CHECK(buf[i] == 0x5a);
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	return 0;
}

/* Tries a context on device 1 while the holder has one. */
static int second_context(void)
{
	CUdevice dev;
	CUcontext ctx;
	CU(cu.DeviceGet(&dev, 1));
	CUresult rc = cu.DevicePrimaryCtxRetain(&ctx, dev);
	CHECK(rc == CUDA_ERROR_DEVICE_UNAVAILABLE);
	return 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 2 && strcmp(argv[1], "second") == 0)
		return second_context();
	if (argc == 2 && strcmp(argv[1], "holder") == 0)
		return holder();
	if (argc == 2 && strcmp(argv[1], "mps-client") == 0)
		return mps_client();
	if (!gt_fake()) {
		int n = 0;
		CU(cu.DeviceGetCount(&n));
		for (int i = 0; i < n; i++) {
			CUdevice dev;
			int mode = -1, mps = -1;
			CU(cu.DeviceGet(&dev, i));
			CU(cu.DeviceGetAttribute(&mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dev));
			CU(cu.DeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev));
			printf("device %d: compute mode %d, MPS client %d\n", i, mode, mps);
		}
		printf("SKIP: setting compute modes needs nvidia-smi -c as root on an idle GPU; "
		       "the fake (suite cuda-fake) covers them\n");
		return GT_SKIP;
	}

	const char *modes[] = {"FAKECUDA_DEVICES=3",
	                       "FAKECUDA_COMPUTE_MODE=default,exclusive-process,prohibited", NULL};
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, modes);
	gpb_client *c = gt_connect(&d, "gpu-modes");
	CHECK(devices_served(c) == 1);
	CHECK(gt_log_contains(&d, "CUDA device 1 (GPU-facecda0-0000-4000-8000-000000000001) left "
	                          "out: compute mode exclusive-process"));
	/* The refusal says how to have the device served. */
	CHECK(gt_log_contains(&d, "start nvidia-cuda-mps-control -d and run gpubrokerd and its "
	                          "clients with the same CUDA_MPS_PIPE_DIRECTORY"));
	CHECK(gt_log_contains(&d, "left out: compute mode prohibited"));
	CHECK(gt_log_contains(&d, "serving 1 of 3 devices"));
	gpb_disconnect(c);
	gt_daemon_stop(&d);

	const char *exclusive[] = {"FAKECUDA_COMPUTE_MODE=exclusive-process", NULL};
	CHECK(gt_daemon_run_to_exit(&d, "cuda", NULL, exclusive) != 0);
	CHECK(gt_log_contains(&d, "none of the 1 CUDA devices is usable"));
	unlink(d.log);
	rmdir(d.dir);

	/* The fake as strict as the driver: one process per exclusive device. */
	setenv("FAKECUDA_DEVICES", "2", 1);
	setenv("FAKECUDA_COMPUTE_MODE", "default,exclusive-process", 1);
	char line[32];
	int out;
	char *hold[] = {"holder", NULL}, *second[] = {"second", NULL};
	pid_t pid = gt_spawn_self(hold, &out);
	CHECK(gt_read_line(out, line, sizeof(line)) && strcmp(line, "ready") == 0);
	CHECK(gt_wait(gt_spawn_self(second, NULL)) == 0);
	kill(pid, SIGKILL);
	gt_wait(pid);
	close(out);

	/* Under MPS the exclusive device is served, and its clients map it. */
	setenv("FAKECUDA_MPS", "1", 1);
	const char *mps[] = {"FAKECUDA_MPS=1", NULL};
	gt_daemon_start(&d, "cuda", NULL, mps);
	CHECK(gt_log_contains(&d, "CUDA device 1 (GPU-facecda0-0000-4000-8000-000000000001): "
	                          "this daemon is an MPS client (compute mode exclusive-process)"));
	CHECK(gt_log_contains(&d, "serving 2 of 2 devices"));
	c = gt_connect(&d, "gpu-modes");
	CHECK(devices_served(c) == 2);
	setenv("GT_MPS_SOCKET", d.socket, 1);
	char *client[] = {"mps-client", NULL};
	CHECK(gt_wait(gt_spawn_self(client, NULL)) == 0);
	gpb_disconnect(c);
	gt_daemon_stop(&d);
	unsetenv("FAKECUDA_MPS");
	printf("ok: exclusive-process and prohibited devices left out, with the reason; "
	       "exclusive-process served under MPS\n");
	return 0;
}
