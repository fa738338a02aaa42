/*
 * gpu-legacy.c - helpers of the gpu tests of legacy IPC, capacity and device
 * modes.
 */
#include "gpu-legacy.h"

#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

bool gl_can_switch_uid(void)
{
	return geteuid() == 0;
}

void gl_open_to_others(const struct gt_daemon *d)
{
	const char *fake = getenv("FAKECUDA_DIR");
	CHECK(chmod(d->dir, 0755) == 0);
	if (gt_fake() && fake)
		CHECK(chmod(fake, 0777) == 0);
}

void gl_become_other_user(void)
{
	CHECK(setgroups(0, NULL) == 0);
	CHECK(setgid(GL_OTHER_UID) == 0);
	CHECK(setuid(GL_OTHER_UID) == 0);
	CHECK(geteuid() == GL_OTHER_UID);
}

void gl_marker(unsigned char out[64], unsigned seed)
{
	gt_fill(out, 64, seed * 7919u + 1);
}

void gl_write_marker(void *ptr, unsigned seed)
{
	unsigned char m[64];
	gl_marker(m, seed);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)ptr, m, sizeof(m)));
	CU(cu.CtxSynchronize());
}

bool gl_range_holds_marker(void *ptr, unsigned seed, size_t *range)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	unsigned char m[64];
	CU(cu.MemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)ptr));
	*range = size;
	unsigned char *buf = malloc(size);
	CHECK(buf != NULL);
	CU(cu.MemcpyDtoH(buf, base, size));
	gl_marker(m, seed);
	bool found = false;
	for (size_t i = 0; !found && i + sizeof(m) <= size; i += 64)
		found = memcmp(buf + i, m, sizeof(m)) == 0;
	free(buf);
	return found;
}

uint64_t gl_status_device_u64(gpb_client *c, int dev, const char *field)
{
	char *json = NULL;
	GPB(gpb_request(c, "status", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "devices"), dev);
	const cJSON *v = cJSON_GetObjectItem(d, field);
	if (!cJSON_IsString(v) && !cJSON_IsNumber(v))
		GT_FAIL("status: device %d has no %s", dev, field);
	uint64_t x =
	    cJSON_IsString(v) ? strtoull(v->valuestring, NULL, 10) : (uint64_t)v->valuedouble;
	cJSON_Delete(r);
	return x;
}
