/*
 * test-info.c (gpu-info) - devices as the driver describes them, addressed
 * by index or by UUID.
 *
 * `--backend auto` chooses cuda when a device answers; `devices` lists every
 * CUDA device with the driver's name, UUID (nvidia-smi's "GPU-..." form),
 * compute capability and total memory (cuMemGetInfo); register accepts the
 * UUID in any case, with or without "GPU-", and refuses an unknown one; an
 * allocation on the last device works and reports that device.
 */
#include "gpu-common.h"

#include <ctype.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);
	CHECK(cJSON_IsString(v));
	return v->valuestring;
}

/* register with a raw "device" value; returns the reply's device or -1. */
static int register_raw(gpb_client *c, const char *device_json)
{
	char params[256], *json = NULL;
	snprintf(params, sizeof(params), "{\"name\":\"gpu-info-raw\",\"device\":%s}", device_json);
	if (gpb_request(c, "register", params, &json) < 0)
		return -1;
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	int dev = cJSON_GetObjectItem(r, "device")->valueint;
	cJSON_Delete(r);
	return dev;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	struct gt_daemon d;
	gt_daemon_start(&d, "auto", NULL, NULL);
	CHECK(gt_log_contains(&d, "using the cuda backend"));
	gpb_client *c = gt_connect(&d, "gpu-info");
	char backend[16];
	gt_status_backend(c, backend, sizeof(backend));
	CHECK(strcmp(backend, "cuda") == 0);

	char *json = NULL;
	GPB(gpb_request(c, "devices", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *devs = cJSON_GetObjectItem(r, "devices");
	CHECK(cJSON_IsArray(devs));
	int n = 0;
	CU(cu.DeviceGetCount(&n));
	if (cJSON_GetArraySize(devs) != n)
		GT_FAIL("the daemon serves %d of %d devices (see its log)",
		        cJSON_GetArraySize(devs), n);
	char last_uuid[CUDA_UUID_LEN] = "";
	for (int i = 0; i < n; i++) {
		const cJSON *o = cJSON_GetArrayItem(devs, i);
		CUdevice dev;
		CUuuid uuid;
		char name[96], text[CUDA_UUID_LEN], cc[16];
		int major, minor;
		size_t free_bytes, total;
		CUcontext ctx, popped;

		CU(cu.DeviceGet(&dev, i));
		CU(cu.DeviceGetName(name, sizeof(name), dev));
		CU(cu.DeviceGetUuid(&uuid, dev));
		cuda_uuid_format(&uuid, text);
		CU(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
		                         dev));
		CU(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
		                         dev));
		snprintf(cc, sizeof(cc), "%d.%d", major, minor);
		CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
		CU(cu.CtxPushCurrent(ctx));
		CU(cu.MemGetInfo(&free_bytes, &total));
		CU(cu.CtxPopCurrent(&popped));
		CU(cu.DevicePrimaryCtxRelease(dev));
		printf("device %d: %s %s cc %s, %zu MiB\n", i, str(o, "name"), str(o, "uuid"),
		       str(o, "compute_capability"), total >> 20);
		CHECK(strcmp(str(o, "name"), name) == 0);
		CHECK(strcmp(str(o, "uuid"), text) == 0);
		CHECK(strncmp(text, "GPU-", 4) == 0 && strlen(text) == 40);
		CHECK(strcmp(str(o, "compute_capability"), cc) == 0);
		CHECK(strtoull(str(o, "total"), NULL, 10) == total);
		snprintf(last_uuid, sizeof(last_uuid), "%s", text);
	}
	cJSON_Delete(r);

	/* By UUID: the library's field, and the protocol's forms. */
	struct gpb_register_opts opts = {.name = "gpu-info", .device_uuid = last_uuid};
	struct gpb_instance_info info;
	uint64_t inst;
	GPB(gpb_register(c, &opts, &inst));
	GPB(gpb_instance_info(c, inst, &info));
	CHECK(info.device == n - 1);
	char quoted[64], upper[64];
	snprintf(quoted, sizeof(quoted), "\"%s\"", last_uuid + 4);
	CHECK(register_raw(c, quoted) == n - 1);
	snprintf(upper, sizeof(upper), "\"%s\"", last_uuid);
	for (char *p = upper; *p; p++)
		*p = (char)toupper((unsigned char)*p);
	CHECK(register_raw(c, upper) == n - 1);
	CHECK(register_raw(c, "\"GPU-00000000-0000-0000-0000-000000000000\"") == -1);
	CHECK(strstr(gpb_last_error(), "no such device") != NULL);
	opts.device_uuid = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff";
	CHECK(gpb_register(c, &opts, &inst) == GPB_E_INVALID);

	/* Memory on the last device (the library finds it by UUID). */
	opts.device_uuid = last_uuid;
	GPB(gpb_register(c, &opts, &inst));
	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, 1 << 20, 0, &a));
	CHECK(a.device == n - 1);
	gt_cuda_context(n - 1);
	CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)a.ptr, 0x42, 1 << 20));
	CU(cu.CtxSynchronize());
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: %d device(s) described and addressed by UUID\n", n);
	return 0;
}
