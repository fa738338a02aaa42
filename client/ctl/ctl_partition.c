/*
 * ctl_partition.c - gpubrokerctl's partition commands: partition-create,
 * partition-destroy and partitions (one row per partition and device).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "gpubroker.h"
#include "schema.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

int ctl_parse_bytes(const char *arg, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {{"", 0},     {"B", 0},  {"K", 10},   {"KiB", 10}, {"M", 20},
	             {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40},   {"TiB", 40}};
	char *end;
	if (*arg < '0' || *arg > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long n = strtoull(arg, &end, 10);
	for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
		if (errno || strcmp(end, units[i].suffix) != 0)
			continue;
		if (units[i].shift && n > (~0ull >> units[i].shift))
			break;
		*out = (uint64_t)n << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

int params_partition_create(const struct ctl_options *o, cJSON *params)
{
	char *end, buf[24];
	uint64_t size;
	if (!o->uid || !o->size)
		return usage_error("partition-create needs --uid UID and --size SIZE");
	errno = 0;
	unsigned long uid = strtoul(o->uid, &end, 10);
	if (errno || end == o->uid || *end || *o->uid == '-' || uid > 4294967294ul)
		return usage_error("--uid needs a uid (0 to 4294967294), not '%s'", o->uid);
	if (ctl_parse_bytes(o->size, &size) < 0 || size == 0)
		return usage_error("--size needs bytes per device, at least 1 (units K M G T: "
		                   "binary), not '%s'",
		                   o->size);
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)size);
	if (!cJSON_AddStringToObject(params, PROTO_F_NAME, o->args[0]) ||
	    !cJSON_AddNumberToObject(params, PROTO_F_UID, (double)uid) ||
	    !cJSON_AddStringToObject(params, PROTO_F_SIZE, buf))
		return ctl_oom();
	if (!o->ndevices)
		return EXIT_OK;
	cJSON *devs = cJSON_AddArrayToObject(params, PROTO_F_DEVICES);
	for (int i = 0; devs && i < o->ndevices; i++) {
		const char *d = o->devices[i];
		unsigned long n = strtoul(d, &end, 10);
		/* An index as a number, anything else as a UUID for the daemon. */
		cJSON *v = d[0] >= '0' && d[0] <= '9' && !*end ? cJSON_CreateNumber((double)n)
		                                               : cJSON_CreateString(d);
		if (!v || !cJSON_AddItemToArray(devs, v)) {
			cJSON_Delete(v);
			return ctl_oom();
		}
	}
	return devs ? EXIT_OK : ctl_oom();
}

/* The token alone (TOKEN=$(gpubrokerctl partition-create ...)); CSV adds
 * the name and uid. */
int print_partition_token(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *token = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_TOKEN);
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_NAME);
	const cJSON *uid = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_UID);
	if (!cJSON_IsString(token) || !cJSON_IsString(name) || !cJSON_IsNumber(uid))
		return ctl_bad_reply(PROTO_F_TOKEN);
	if (o->format == CTL_CSV) {
		if (header)
			printf("name,uid,token\n");
		printf("%s,%.0f,%s\n", name->valuestring, uid->valuedouble, token->valuestring);
		return EXIT_OK;
	}
	printf("%s\n", token->valuestring);
	return EXIT_OK;
}

int params_partition_name(const struct ctl_options *o, cJSON *params)
{
	return cJSON_AddStringToObject(params, PROTO_F_NAME, o->args[0]) ? EXIT_OK : ctl_oom();
}

int print_partition_destroyed(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_NAME);
	const cJSON *sessions = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_SESSIONS);
	const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_RECLAIMED);
	if (!cJSON_IsString(name) || !cJSON_IsNumber(sessions) || !cJSON_IsString(bytes))
		return ctl_bad_reply(PROTO_F_RECLAIMED);
	if (o->format == CTL_CSV) {
		if (header)
			printf("name,sessions,reclaimed\n");
		printf("%s,%.0f,%s\n", name->valuestring, sessions->valuedouble,
		       bytes->valuestring);
		return EXIT_OK;
	}
	char buf[32];
	ctl_format_size(strtoull(bytes->valuestring, NULL, 10), buf, sizeof(buf));
	printf("partition %s destroyed: %.0f sessions ended, %s reclaimed\n", name->valuestring,
	       sessions->valuedouble, buf);
	return EXIT_OK;
}

/* One row per partition and device: {name, uid, sessions, device, size,
 * used, free}. NULL when out of memory or the reply is malformed. */
static cJSON *partition_rows(const cJSON *result)
{
	cJSON *rows = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(rows, "rows");
	const cJSON *p, *d;
	if (!arr)
		goto fail;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(result, PROTO_F_PARTITIONS))
	{
		cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(p, PROTO_F_DEVICES))
		{
			cJSON *row = cJSON_Duplicate(d, true);
			const char *keys[] = {PROTO_F_NAME, PROTO_F_UID, PROTO_F_SESSIONS};
			if (!row || !cJSON_AddItemToArray(arr, row)) {
				cJSON_Delete(row);
				goto fail;
			}
			for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
				const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, keys[i]);
				cJSON *copy = v ? cJSON_Duplicate(v, true) : NULL;
				if (!copy || !cJSON_AddItemToObject(row, keys[i], copy)) {
					cJSON_Delete(copy);
					goto fail;
				}
			}
		}
	}
	return rows;
fail:
	cJSON_Delete(rows);
	return NULL;
}

int print_partitions(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_NAME, "NAME", CTL_TEXT},        {PROTO_F_UID, "UID", CTL_NUM},
	    {PROTO_F_SESSIONS, "SESSIONS", CTL_NUM}, {PROTO_F_DEVICE, "DEVICE", CTL_NUM},
	    {PROTO_F_SIZE, "SIZE", CTL_SIZE},        {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_FREE, "FREE", CTL_SIZE},
	};
	cJSON *rows = partition_rows(result);
	if (!rows)
		return ctl_bad_reply(PROTO_F_PARTITIONS);
	int rc = print_rows(rows, "rows", cols, ARRAY_SIZE(cols), o->format, header);
	cJSON_Delete(rows);
	if (rc == EXIT_OK)
		print_others(result, PROTO_F_PARTITIONS, o->format);
	return rc;
}
