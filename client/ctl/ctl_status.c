/*
 * ctl_status.c - gpubrokerctl's views of the daemon's state: status (and
 * top), devices, clients and stats, the recall figures with them.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctl.h"
#include "ctl_output.h"
#include "gpubroker.h"
#include "schema.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A status device row for a table, its limit as ctl_format_limit writes it. */
static cJSON *status_row(const cJSON *dev, const char *unused)
{
	cJSON *row = cJSON_Duplicate(dev, true);
	char text[64];

	if (!row)
		return NULL;
	ctl_format_limit(cJSON_GetObjectItemCaseSensitive(dev, PROTO_F_LIMIT),
	                 cJSON_GetObjectItemCaseSensitive(dev, PROTO_F_LIMIT_FRACTION),
	                 cJSON_GetObjectItemCaseSensitive(dev, PROTO_F_CAPACITY), text,
	                 sizeof(text));
	cJSON_DeleteItemFromObjectCaseSensitive(row, PROTO_F_LIMIT);
	if (!cJSON_AddStringToObject(row, PROTO_F_LIMIT, text)) {
		cJSON_Delete(row);
		return NULL;
	}
	return row;
}

int print_status(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},        {PROTO_F_NAME, "NAME", CTL_TEXT},
	    {PROTO_F_TRANSPORT, "TRANSPORT", CTL_TEXT}, {PROTO_F_TOTAL, "TOTAL", CTL_SIZE},
	    {PROTO_F_LIMIT, "LIMIT", CTL_NUM},          {PROTO_F_RESERVED, "RESERVED", CTL_SIZE},
	    {PROTO_F_USED, "USED", CTL_SIZE},           {PROTO_F_FENCED, "FENCED", CTL_SIZE},
	    {PROTO_F_ORPHANED, "ORPHANED", CTL_SIZE},
	};
	/* CSV: exact figures, the limit's two members as the daemon sends them. */
	static const struct ctl_column csv_cols[] = {
	    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},
	    {PROTO_F_NAME, "NAME", CTL_TEXT},
	    {PROTO_F_TOTAL, "TOTAL", CTL_SIZE},
	    {PROTO_F_RESERVED, "RESERVED", CTL_SIZE},
	    {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_FENCED, "FENCED", CTL_SIZE},
	    {PROTO_F_ORPHANED, "ORPHANED", CTL_SIZE},
	    {PROTO_F_LIMIT, "LIMIT", CTL_SIZE},
	    {PROTO_F_LIMIT_FRACTION, "FRACTION", CTL_TEXT},
	    {PROTO_F_TRANSPORT, "TRANSPORT", CTL_TEXT},
	};
	static const struct {
		const char *key, *label;
	} summary[] = {
	    {PROTO_F_BACKEND, "backend"},
	    {PROTO_F_SERVER_VERSION, "version"},
	    {PROTO_F_PID, "pid"},
	    {PROTO_F_UPTIME_S, "uptime"},
	    {PROTO_F_MODE, "mode"},
	    {PROTO_F_ALLOCATOR, "allocator"},
	    {PROTO_F_CLIENTS, "clients"},
	    {PROTO_F_INSTANCES, "instances"},
	    {PROTO_F_ALLOCATIONS, "allocations"},
	    {PROTO_F_EXPORTS, "exports"},
	    {PROTO_F_ORPHANS, "orphans"},
	};

	/* CSV is for machines: only the device rows (json has the rest). */
	if (o->format == CTL_TABLE) {
		for (size_t i = 0; i < ARRAY_SIZE(summary); i++) {
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, summary[i].key);
			char buf[64], *text;

			if (strcmp(summary[i].key, PROTO_F_UPTIME_S) == 0 && cJSON_IsNumber(v) &&
			    v->valuedouble >= 0) {
				ctl_format_duration((uint64_t)v->valuedouble, buf, sizeof(buf));
				text = strdup(buf);
			} else {
				text = ctl_format_value(v, CTL_TEXT, o->format);
			}
			if (!text) {
				fputs("gpubrokerctl: out of memory\n", stderr);
				return EXIT_ERROR;
			}
			printf("%-13s%s\n", summary[i].label, text);
			free(text);
		}
		putchar('\n');
		return print_rows_mapped(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_DEVICES),
		                         PROTO_F_DEVICES, status_row, NULL, cols, ARRAY_SIZE(cols),
		                         o->format, header);
	}
	return print_rows(result, PROTO_F_DEVICES, csv_cols, ARRAY_SIZE(csv_cols), o->format,
	                  header);
}

int print_devices(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},  {PROTO_F_NAME, "NAME", CTL_TEXT},
	    {PROTO_F_UUID, "UUID", CTL_TEXT},     {PROTO_F_TOTAL, "TOTAL", CTL_SIZE},
	    {PROTO_F_FREE, "FREE", CTL_SIZE},     {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_FENCED, "FENCED", CTL_SIZE}, {PROTO_F_TRANSPORT, "TRANSPORT", CTL_TEXT},
	};

	return print_rows(result, PROTO_F_DEVICES, cols, ARRAY_SIZE(cols), o->format, header);
}

int print_clients(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_SESSION, "SESSION", CTL_TEXT},
	    {PROTO_F_PID, "PID", CTL_NUM},
	    {PROTO_F_UID, "UID", CTL_NUM},
	    {PROTO_F_NAME, "NAME", CTL_TEXT},
	    {PROTO_F_INSTANCES, "INSTANCES", CTL_NUM},
	    {PROTO_F_ALLOCATIONS, "ALLOCATIONS", CTL_NUM},
	    {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_LEASED, "LEASED", CTL_SIZE},
	    {PROTO_F_IN_USE, "IN_USE", CTL_SIZE},
	    {PROTO_F_RECALLS_PENDING, "RECALLS", CTL_NUM},
	    {PROTO_F_CAP, "CAP", CTL_SIZE},
	    /* "-" (CSV: empty) for a client outside partitions. */
	    {PROTO_F_PARTITION, "PARTITION", CTL_TEXT},
	};

	int rc = print_rows(result, PROTO_F_CLIENTS, cols, ARRAY_SIZE(cols), o->format, header);

	if (rc == EXIT_OK)
		print_others(result, PROTO_F_CLIENTS, o->format);
	return rc;
}

int print_stats(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},
	    {PROTO_F_RESERVED, "RESERVED", CTL_SIZE},
	    {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_FENCED, "FENCED", CTL_SIZE},
	    {PROTO_F_FREE, "FREE", CTL_SIZE},
	    {PROTO_F_FREE_BLOCKS, "FREE_BLOCKS", CTL_NUM},
	    {PROTO_F_LARGEST_FREE, "LARGEST_FREE", CTL_SIZE},
	    {PROTO_F_PEAK, "PEAK", CTL_SIZE},
	    {PROTO_F_SLABS, "SLABS", CTL_NUM},
	    {PROTO_F_LIVE, "LIVE", CTL_NUM},
	    {PROTO_F_ALLOCS, "ALLOCS", CTL_NUM},
	    {PROTO_F_FREES, "FREES", CTL_NUM},
	    {PROTO_F_OOMS, "OOMS", CTL_NUM},
	    {PROTO_F_LEASED, "LEASED", CTL_SIZE},
	    {PROTO_F_IN_USE, "IN_USE", CTL_SIZE},
	};
	/* The daemon's totals (recall, issue 28), under the table. */
	static const struct {
		const char *key, *label;
	} recalls[] = {
	    {PROTO_F_RECALLS_SENT, "sent"},
	    {PROTO_F_RECALLS_ANSWERED, "answered"},
	    {PROTO_F_RECALLS_PENDING, "pending"},
	    {PROTO_F_RECALLS_TIMED_OUT, "timed out"},
	};
	int rc = print_rows(result, PROTO_F_DEVICES, cols, ARRAY_SIZE(cols), o->format, header);

	if (rc != EXIT_OK || o->format != CTL_TABLE ||
	    !cJSON_GetObjectItemCaseSensitive(result, PROTO_F_RECALLS_SENT))
		return rc;
	printf("\nrecalls");
	for (size_t i = 0; i < ARRAY_SIZE(recalls); i++) {
		char *text = ctl_format_value(
		    cJSON_GetObjectItemCaseSensitive(result, recalls[i].key), CTL_NUM, o->format);

		if (!text)
			return ctl_oom();
		printf("%s %s %s", i ? "," : "", recalls[i].label, text);
		free(text);
	}
	putchar('\n');
	return EXIT_OK;
}
