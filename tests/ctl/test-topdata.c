/*
 * test-topdata.c - `gpubrokerctl top`'s model (client/ctl/ctl_topdata.h)
 * from answers shaped as the daemon sends them: the bar's parts and cells,
 * the client order, the events between two snapshots.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl_topdata.h"

#define MiB (1024ull * 1024)

/* A snapshot from JSON texts (stats, policy, partitions may be NULL). */
static void fill(struct top_snapshot *s, const char *status, const char *stats, const char *clients,
                 const char *policy)
{
	cJSON *st = cJSON_Parse(status), *sa = stats ? cJSON_Parse(stats) : NULL;
	cJSON *cl = cJSON_Parse(clients), *po = policy ? cJSON_Parse(policy) : NULL;

	assert_non_null(st);
	assert_non_null(cl);
	assert_int_equal(top_snapshot_fill(s, st, sa, cl, po, NULL), 0);
	cJSON_Delete(st);
	cJSON_Delete(sa);
	cJSON_Delete(cl);
	cJSON_Delete(po);
}

static const char *status_1g =
    "{\"mode\":\"active\",\"pid\":7,\"uptime_s\":3,\"devices\":[{\"device\":0,\"name\":\"g\","
    "\"total\":\"1073741824\",\"used\":\"104857600\",\"reserved\":\"209715200\","
    "\"fenced\":\"10485760\"}]}";
static const char *stats_1g = "{\"recalls_sent\":\"2\",\"devices\":[{\"device\":0,"
                              "\"leased\":\"62914560\",\"in_use\":\"20971520\",\"ooms\":\"1\"}]}";

static void test_parts(void **state)
{
	struct top_snapshot *s = malloc(sizeof(*s));
	(void)state;

	fill(s, status_1g, stats_1g, "{\"clients\":[]}", NULL);
	const struct top_device *d = &s->devices[0];
	/* used 100 MiB = 40 leased free + 10 fenced + 50 in use; reserved 200
	 * leaves 100 kept; free is the rest of 1 GiB. */
	assert_int_equal(d->part[TOP_LEASED_FREE], 40 * MiB);
	assert_int_equal(d->part[TOP_FENCED], 10 * MiB);
	assert_int_equal(d->part[TOP_IN_USE], 50 * MiB);
	assert_int_equal(d->part[TOP_KEPT], 100 * MiB);
	assert_int_equal(d->part[TOP_FREE], 824 * MiB);
	int cells[TOP_NPARTS], sum = 0;
	for (int width = 5; width <= 200; width += 13) {
		top_bar_cells(d, width, cells);
		sum = 0;
		for (int p = 0; p < TOP_NPARTS; p++) {
			assert_true(cells[p] >= 1); /* every part is non-empty here */
			sum += cells[p];
		}
		assert_int_equal(sum, width);
	}
	top_bar_cells(d, 100, cells);
	assert_int_equal(cells[TOP_FREE], 80); /* 824/1024 of 100, rounded */
	free(s);
}

static const char *clients_2 =
    "{\"clients\":[{\"session\":\"a\",\"pid\":1,\"uid\":0,\"name\":\"small\",\"used\":\"1048576\","
    "\"cap\":\"9\"},{\"session\":\"b\",\"pid\":2,\"uid\":0,\"name\":\"big\",\"used\":\"9048576\","
    "\"cap\":\"1\"}],\"others\":{\"clients\":3,\"used\":\"5\"}}";
static const char *policy_2 = "{\"instances\":[{\"instance\":\"i1\",\"session\":\"a\",\"name\":"
                              "\"x\",\"pid\":1,\"proportion\":0.25,\"cap\":\"100\"},{\"instance\":"
                              "\"i2\",\"session\":\"b\",\"name\":\"y\",\"pid\":2,\"proportion\":"
                              "null,\"cap\":\"200\"}]}";

static void test_sort(void **state)
{
	struct top_snapshot *s = malloc(sizeof(*s));
	(void)state;

	fill(s, status_1g, stats_1g, clients_2, policy_2);
	assert_int_equal(s->others_clients, 3);
	top_snapshot_sort(s, TOP_SORT_USED);
	assert_string_equal(s->clients[0].name, "big");
	assert_true(s->clients[0].proportion < 0 && s->clients[0].proportion == -1); /* auto */
	assert_true(s->clients[1].proportion == 0.25);
	top_snapshot_sort(s, TOP_SORT_CAP);
	assert_string_equal(s->clients[0].name, "small");
	top_snapshot_sort(s, TOP_SORT_NAME);
	assert_string_equal(s->clients[0].name, "big");
	top_snapshot_sort(s, TOP_SORT_PID);
	assert_int_equal(s->clients[0].pid, 1);
	free(s);
}

static char events[16][160];
static int nevents;

static void collect(const char *line, void *arg)
{
	(void)arg;
	if (nevents < 16)
		snprintf(events[nevents++], sizeof(events[0]), "%s", line);
}

static bool saw(const char *text)
{
	for (int i = 0; i < nevents; i++)
		if (strstr(events[i], text))
			return true;
	return false;
}

static void test_events(void **state)
{
	struct top_snapshot *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	(void)state;

	fill(a, status_1g, stats_1g, clients_2, policy_2);
	/* b: "small" left, "new" came, i2's cap changed, mode, 3 more recalls
	 * and 2 more refusals. */
	fill(b,
	     "{\"mode\":\"passive\",\"invalidations\":\"1\",\"evictions\":\"2\",\"devices\":[{"
	     "\"device\":0,\"total\":\"1073741824\"}]}",
	     "{\"recalls_sent\":\"5\",\"devices\":[{\"device\":0,\"ooms\":\"3\"}]}",
	     "{\"clients\":[{\"session\":\"b\",\"pid\":2,\"name\":\"big\"},{\"session\":\"c\","
	     "\"pid\":3,\"uid\":1000,\"name\":\"new\"}]}",
	     "{\"instances\":[{\"instance\":\"i2\",\"session\":\"b\",\"name\":\"y\",\"pid\":2,"
	     "\"cap\":\"1073741824\"}]}");
	nevents = 0;
	top_events(a, b, collect, NULL);
	assert_true(saw("mode passive (was active)"));
	assert_true(saw("client new (pid 3, uid 1000) connected"));
	assert_true(saw("client small (pid 1) left"));
	assert_true(saw("instance y (pid 2) cap 1024 MiB (was 0 MiB)"));
	assert_true(saw("3 lease recall(s) sent"));
	assert_true(saw("device 0: 2 allocation(s) refused"));
	assert_true(saw("invalidate: every allocation released (1 time(s))"));
	assert_true(saw("2 client(s) evicted by an operator"));
	assert_int_equal(nevents, 8);
	/* Nothing changed: nothing to tell. */
	nevents = 0;
	top_events(b, b, collect, NULL);
	assert_int_equal(nevents, 0);
	free(a);
	free(b);
}

static void test_bad_answers(void **state)
{
	struct top_snapshot *s = malloc(sizeof(*s));
	cJSON *obj = cJSON_Parse("{}"), *cl = cJSON_Parse("{\"clients\":[]}");
	(void)state;

	assert_int_equal(top_snapshot_fill(s, obj, NULL, cl, NULL, NULL), -22); /* no devices */
	assert_int_equal(top_snapshot_fill(s, NULL, NULL, cl, NULL, NULL), -22);
	assert_int_equal(top_snapshot_fill(s, obj, NULL, obj, NULL, NULL), -22); /* no clients */
	cJSON_Delete(obj);
	cJSON_Delete(cl);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parts),
	    cmocka_unit_test(test_sort),
	    cmocka_unit_test(test_events),
	    cmocka_unit_test(test_bad_answers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
