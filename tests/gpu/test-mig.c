/*
 * test-mig.c (gpu-mig) - MIG instances are named as nvidia-smi and
 * CUDA_VISIBLE_DEVICES name them, "MIG-..." (issue 15, finding 11).
 *
 * Against the fake (FAKECUDA_MIG=1: the device is a MIG instance, whose
 * cuDeviceGetUuid_v2 differs from its parent's): `devices` prints
 * "MIG-...", register takes it (any case) and a slab opens on it (the
 * library finds the device by the same name). Before the fix the daemon
 * printed "GPU-..." and refused "MIG-...". On a GPU each device's UUID and
 * name are printed, and a device whose name says MIG must be "MIG-...";
 * without one the test skips.
 */
#include "gpu-legacy.h"

#include <ctype.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The daemon's UUID of device 0. */
static void daemon_uuid(gpb_client *c, char *out, size_t len)
{
	char *json = NULL;
	GPB(gpb_request(c, "devices", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *u =
	    cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "devices"), 0), "uuid");
	CHECK(cJSON_IsString(u));
	snprintf(out, len, "%s", u->valuestring);
	cJSON_Delete(r);
}

/* Registers by the MIG name, allocates, writes the slab. */
static int client(const char *socket, const char *uuid)
{
	gpb_client *c = NULL;
	struct gpb_register_opts opts = {.name = "gpu-mig-client", .device_uuid = uuid};
	uint64_t inst;
	struct gpb_allocation a;
	GPB(gpb_connect(socket, "gpu-mig-client", &c));
	GPB(gpb_register(c, &opts, &inst));
	GPB(gpb_alloc(c, inst, 1u << 20, 0, &a));
	gt_cuda_context(0);
	gl_write_marker(a.ptr, 5);
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	return 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 4 && strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3]);
	if (!gt_fake()) {
		int n = 0, mig = 0;
		CU(cu.DeviceGetCount(&n));
		for (int i = 0; i < n; i++) {
			CUdevice dev;
			char name[128], uuid[CUDA_UUID_LEN];
			CU(cu.DeviceGet(&dev, i));
			CU(cu.DeviceGetName(name, sizeof(name), dev));
			CU(cuda_api_device_uuid(&cu, dev, uuid));
			printf("device %d: %s %s\n", i, uuid, name);
			if (strstr(name, " MIG ")) {
				CHECK(strncmp(uuid, "MIG-", 4) == 0);
				mig++;
			}
		}
		if (!mig) {
			printf("SKIP: no MIG instance on this machine\n");
			return GT_SKIP;
		}
		return 0;
	}

	const char *env[] = {"FAKECUDA_MIG=1", NULL};
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, env);
	gpb_client *c = gt_connect(&d, "gpu-mig");
	char uuid[64];
	daemon_uuid(c, uuid, sizeof(uuid));
	printf("the daemon names the instance %s\n", uuid);
	CHECK(strncmp(uuid, "MIG-", 4) == 0 && strlen(uuid) == 40);

	struct gpb_register_opts opts = {.name = "gpu-mig", .device_uuid = uuid};
	uint64_t inst;
	GPB(gpb_register(c, &opts, &inst));
	char upper[64];
	snprintf(upper, sizeof(upper), "%s", uuid);
	for (char *p = upper; *p; p++)
		*p = (char)toupper((unsigned char)*p);
	opts.device_uuid = upper;
	GPB(gpb_register(c, &opts, &inst));
	opts.device_uuid = uuid + 4; /* without the prefix */
	GPB(gpb_register(c, &opts, &inst));

	/* The library must find the device by the same name, in a process
	 * whose fake is a MIG instance too. */
	setenv("FAKECUDA_MIG", "1", 1);
	char *args[] = {"client", d.socket, uuid, NULL};
	CHECK(gt_wait(gt_spawn_self(args, NULL)) == 0);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: MIG instances named MIG-... and taken by that name\n");
	return 0;
}
