/*
 * ctl_map.c - `gpubrokerctl devices --map`: each slab of a device as a row
 * of cells (the daemon's device_map), so that fragmentation shows at a
 * glance: # an allocation, = a lease, ! held (fenced or orphaned), . free.
 * A cell is one 64th of its slab and shows what covers most of it (a tie
 * goes to the busier state: an allocation over a lease over held over
 * free). The row starts with the slab's owner (uid, partition) and size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "schema.h"

enum { MAP_FREE, MAP_HELD, MAP_LEASE, MAP_USED, MAP_NSTATES }; /* busier last */
static const char map_char[MAP_NSTATES] = {'.', '!', '=', '#'};

static int map_state(const char *s)
{
	if (strcmp(s, PROTO_V_MAP_USED) == 0)
		return MAP_USED;
	if (strcmp(s, PROTO_V_MAP_LEASE) == 0)
		return MAP_LEASE;
	if (strcmp(s, PROTO_V_MAP_HELD) == 0)
		return MAP_HELD;
	return MAP_FREE;
}

static uint64_t map_u64(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) && v->valuestring ? strtoull(v->valuestring, NULL, 10) : 0;
}

void ctl_map_cells(const cJSON *blocks, uint64_t slab_size, char *cells, int ncells)
{
	for (int c = 0; c < ncells; c++) {
		uint64_t lo = slab_size * (uint64_t)c / (uint64_t)ncells;
		uint64_t hi = slab_size * (uint64_t)(c + 1) / (uint64_t)ncells;
		uint64_t bytes[MAP_NSTATES] = {0};
		const cJSON *b;
		cJSON_ArrayForEach(b, blocks)
		{
			uint64_t off = map_u64(b, PROTO_F_OFFSET),
			         end = off + map_u64(b, PROTO_F_SIZE);
			const cJSON *st = cJSON_GetObjectItemCaseSensitive(b, PROTO_F_STATE);
			if (end <= lo || off >= hi || !cJSON_IsString(st))
				continue;
			bytes[map_state(st->valuestring)] +=
			    (end < hi ? end : hi) - (off > lo ? off : lo);
		}
		int best = MAP_FREE;
		for (int s = 1; s < MAP_NSTATES; s++)
			if (bytes[s] >= bytes[best] && bytes[s])
				best = s;
		cells[c] = map_char[best];
	}
	cells[ncells] = '\0';
}

int print_device_map(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_DEVICES), *d, *s;
	char cells[CTL_MAP_CELLS + 1], size[16], owner[PROTO_MAX_NAME + 32];

	(void)o;
	if (!cJSON_IsArray(devs))
		return ctl_bad_reply("no devices in the map");
	if (header)
		printf("# allocation  = lease  ! held (fenced or orphaned)  . free; a cell is 1/%d "
		       "of its slab\n",
		       CTL_MAP_CELLS);
	cJSON_ArrayForEach(d, devs)
	{
		const cJSON *dev = cJSON_GetObjectItemCaseSensitive(d, PROTO_F_DEVICE);
		const cJSON *slabs = cJSON_GetObjectItemCaseSensitive(d, PROTO_F_SLABS);
		int n = cJSON_GetArraySize(slabs);
		printf("device %d: %d slab%s\n", cJSON_IsNumber(dev) ? dev->valueint : -1, n,
		       n == 1 ? "" : "s");
		cJSON_ArrayForEach(s, slabs)
		{
			const cJSON *uid = cJSON_GetObjectItemCaseSensitive(s, PROTO_F_UID);
			const cJSON *part = cJSON_GetObjectItemCaseSensitive(s, PROTO_F_PARTITION);
			const cJSON *ded = cJSON_GetObjectItemCaseSensitive(s, PROTO_F_DEDICATED);
			uint64_t bytes = map_u64(s, PROTO_F_SIZE);
			ctl_format_size(bytes, size, sizeof(size));
			snprintf(owner, sizeof(owner), "uid %d%s%s",
			         cJSON_IsNumber(uid) ? uid->valueint : -1,
			         cJSON_IsString(part) ? " " : "",
			         cJSON_IsString(part) ? part->valuestring : "");
			ctl_map_cells(cJSON_GetObjectItemCaseSensitive(s, PROTO_F_BLOCKS), bytes,
			              cells, CTL_MAP_CELLS);
			printf("  %-20s %10s%s [%s]\n", owner, size, cJSON_IsTrue(ded) ? "*" : " ",
			       cells);
		}
	}
	return EXIT_OK;
}
