/*
 * test-metrics-exposition.c - `gpubrokerctl metrics` against the real daemon: the whole
 * output checked against the Prometheus text exposition format (0.0.4) and
 * its naming conventions, the per-user cap and the wait counters moving as
 * allocations wait, and `--textfile` replacing its file atomically.
 *
 * The format check is built in, so it runs everywhere; promtool, when
 * installed, checks the same output as well.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

/* The daemon's configuration: a cap on our uid, and a limit on what each
 * device hands out, which makes waits (a user's cap refuses at once). */
#define CAP   (64u << 20)
#define LIMIT "8MiB"
#define MIB   (1u << 20)
/* An instance name that needs every escape a label value has. */
#define ODD_NAME  "we\"ird\\name\nx"
#define ODD_LABEL "name=\"we\\\"ird\\\\name\\nx\""

static struct th_daemon daemon_;
static char conf_path[64];
static char out[262144];

static int setup(void **state)
{
	snprintf(conf_path, sizeof(conf_path), "/tmp/gpb-test-metrics-%d.conf", (int)getpid());
	FILE *f = fopen(conf_path, "w");
	assert_non_null(f);
	fprintf(f, "uid.%u.cap = %u\nlimit = " LIMIT "\n", (unsigned)getuid(), CAP);
	assert_int_equal(fclose(f), 0);
	const char *extra[] = {"--config", conf_path, NULL};
	th_daemon_start(&daemon_, extra);
	return 0;
}

static int teardown(void **state)
{
	unlink(conf_path);
	assert_int_equal(th_daemon_stop(&daemon_), 0);
	return 0;
}

/* ---- the exposition format ------------------------------------------------- */

struct family {
	char name[128];
	char type[16];
	bool help, samples, closed;
};

struct expo {
	struct family fam[128];
	int nfam, current; /* current: the family of the last sample, -1 none */
	char *series[1024];
	int nseries;
	char *line; /* the line being checked */
};

/* The checker reports the first fault through a jump, so that it can say
 * what is wrong with a bad exposition (test_checker_refuses) as well as
 * fail a test on one. */
static jmp_buf expo_jump;
static char expo_error[512];

__attribute__((format(printf, 1, 2), noreturn)) static void expo_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(expo_error, sizeof(expo_error), fmt, ap);
	va_end(ap);
	longjmp(expo_jump, 1);
}

static bool name_char(char c, bool first, bool colon)
{
	return isalpha((unsigned char)c) || c == '_' || (colon && c == ':') ||
	       (!first && isdigit((unsigned char)c));
}

/* Length of a metric name (colons allowed) or label name at p; 0 if none. */
static size_t name_len(const char *p, bool colon)
{
	size_t n = 0;
	while (p[n] && name_char(p[n], n == 0, colon))
		n++;
	return n;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static struct family *family_find(struct expo *e, const char *name)
{
	for (int i = 0; i < e->nfam; i++) {
		if (strcmp(e->fam[i].name, name) == 0)
			return &e->fam[i];
	}
	return NULL;
}

/* "# HELP name text" or "# TYPE name type"; other comments pass. */
static void expo_comment(struct expo *e, const char *line, int lineno)
{
	bool help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
	if (!help && !type)
		return;
	const char *p = line + 7;
	size_t n = name_len(p, true);
	if (n == 0 || n >= sizeof(e->fam[0].name) || p[n] != ' ' || !p[n + 1])
		expo_fail("line %d: malformed: %s", lineno, line);
	char name[128];
	memcpy(name, p, n);
	name[n] = '\0';
	struct family *f = family_find(e, name);
	if (!f) {
		if (e->nfam == (int)(sizeof(e->fam) / sizeof(e->fam[0])))
			expo_fail("more than %d families", e->nfam);
		f = &e->fam[e->nfam++];
		*f = (struct family){0};
		memcpy(f->name, name, n + 1);
	}
	if (f->samples)
		expo_fail("line %d: %s comes after samples of %s", lineno, help ? "HELP" : "TYPE",
		          name);
	const char *text = p + n + 1;
	if (help) {
		if (f->help)
			expo_fail("line %d: second HELP for %s", lineno, name);
		f->help = true;
		/* Only \\ and \n are escapes in HELP text. */
		for (const char *b = strchr(text, '\\'); b; b = strchr(b + 2, '\\')) {
			if (b[1] != '\\' && b[1] != 'n')
				expo_fail("line %d: bad escape in HELP: %s", lineno, line);
		}
		return;
	}
	if (f->type[0])
		expo_fail("line %d: second TYPE for %s", lineno, name);
	static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strcmp(text, types[i]) == 0)
			snprintf(f->type, sizeof(f->type), "%s", text);
	}
	if (!f->type[0])
		expo_fail("line %d: unknown type: %s", lineno, line);
	/* Prometheus conventions: counters, and only counters, end in _total. */
	if ((strcmp(f->type, "counter") == 0) != ends_with(name, "_total"))
		expo_fail("line %d: %s is a %s: counters and only counters end in _total", lineno,
		          name, f->type);
}

/* The family a sample belongs to: its own name, or a histogram's (or
 * summary's) with the _bucket, _sum or _count suffix. */
static struct family *sample_family(struct expo *e, const char *name)
{
	struct family *f = family_find(e, name);
	if (f && f->type[0])
		return f;
	static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
	for (size_t i = 0; i < 3; i++) {
		if (!ends_with(name, suffixes[i]))
			continue;
		char base[128];
		snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - strlen(suffixes[i])),
		         name);
		f = family_find(e, base);
		if (f && (strcmp(f->type, "histogram") == 0 ||
		          (i > 0 && strcmp(f->type, "summary") == 0)))
			return f;
	}
	return NULL;
}

/* Checks a sample's labels from p (just after '{'); returns the end, after
 * '}'. Sets *le when there is an `le` label. */
static const char *expo_labels(const char *p, const char *line, int lineno, bool *le)
{
	char seen[16][64];
	int nseen = 0;
	for (;;) {
		size_t n = name_len(p, false);
		if (n == 0 || n >= sizeof(seen[0]) || p[n] != '=' || p[n + 1] != '"')
			expo_fail("line %d: bad label: %s", lineno, line);
		if (nseen == 16)
			expo_fail("line %d: too many labels", lineno);
		memcpy(seen[nseen], p, n);
		seen[nseen][n] = '\0';
		for (int i = 0; i < nseen; i++) {
			if (strcmp(seen[i], seen[nseen]) == 0)
				expo_fail("line %d: label %s twice", lineno, seen[i]);
		}
		/* No per-process labels (series would churn with every client);
		 * none that Prometheus sets itself on every target; no reserved
		 * names. */
		static const char *const banned[] = {"pid", "session", "instance", "job"};
		for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
			if (strcmp(seen[nseen], banned[i]) == 0)
				expo_fail("line %d: label '%s': %s", lineno, banned[i], line);
		}
		if (strncmp(seen[nseen], "__", 2) == 0)
			expo_fail("line %d: reserved label name: %s", lineno, line);
		*le |= strcmp(seen[nseen], "le") == 0;
		nseen++;
		/* The value: only \\, \" and \n escapes, no raw newline. */
		for (p += n + 2; *p != '"'; p++) {
			if (!*p)
				expo_fail("line %d: unterminated label value: %s", lineno, line);
			if (*p == '\\' && (++p, *p != '\\' && *p != '"' && *p != 'n'))
				expo_fail("line %d: bad escape in a label value: %s", lineno, line);
		}
		p++;
		if (*p == '}')
			return p + 1;
		if (*p != ',')
			expo_fail("line %d: expected , or }: %s", lineno, line);
		p++;
	}
}

static void expo_sample(struct expo *e, const char *line, int lineno)
{
	size_t n = name_len(line, true);
	if (n == 0 || n >= 128)
		expo_fail("line %d: bad metric name: %s", lineno, line);
	char name[128];
	memcpy(name, line, n);
	name[n] = '\0';
	struct family *f = sample_family(e, name);
	if (!f || !f->help)
		expo_fail("line %d: %s has no # HELP and # TYPE before it", lineno, name);
	int idx = (int)(f - e->fam);
	if (idx != e->current) {
		/* A family's lines form one group. */
		if (f->closed)
			expo_fail("line %d: samples of %s are not together", lineno, f->name);
		if (e->current >= 0)
			e->fam[e->current].closed = true;
		e->current = idx;
	}
	f->samples = true;
	const char *p = line + n;
	bool le = false;
	if (*p == '{')
		p = expo_labels(p + 1, line, lineno, &le);
	if (ends_with(name, "_bucket") && strcmp(f->type, "histogram") == 0 && !le)
		expo_fail("line %d: a bucket without le: %s", lineno, line);
	/* One series, once. */
	for (int i = 0; i < e->nseries; i++) {
		if (strncmp(e->series[i], line, (size_t)(p - line)) == 0 && !e->series[i][p - line])
			expo_fail("line %d: series twice: %s", lineno, line);
	}
	if (e->nseries == (int)(sizeof(e->series) / sizeof(e->series[0])))
		expo_fail("more than %d series", e->nseries);
	e->series[e->nseries++] = strndup(line, (size_t)(p - line));
	/* " value" and an optional " timestamp". */
	if (*p != ' ' || !p[1] || p[1] == ' ')
		expo_fail("line %d: no value: %s", lineno, line);
	char *end;
	errno = 0;
	double v = strtod(p + 1, &end);
	if (end == p + 1 || (*end && *end != ' '))
		expo_fail("line %d: value is not a float: %s", lineno, line);
	if (strcmp(f->type, "counter") == 0 && !(v >= 0))
		expo_fail("line %d: a negative counter: %s", lineno, line);
	if (*end) {
		errno = 0;
		const char *ts = end + 1;
		strtoll(ts, &end, 10);
		if (errno || end == ts || *end)
			expo_fail("line %d: bad timestamp: %s", lineno, line);
	}
}

/* NULL when text is a valid exposition in which every family has HELP and
 * TYPE before its samples, else what is wrong. */
static const char *expo_check(const char *text)
{
	struct expo *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	e->current = -1;
	const char *err = NULL;
	if (setjmp(expo_jump)) {
		err = expo_error;
		goto out;
	}
	size_t len = strlen(text);
	if (len == 0 || text[len - 1] != '\n')
		expo_fail("empty, or no newline at the end");
	int lineno = 0;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		e->line = strndup(p, (size_t)(nl - p));
		assert_non_null(e->line);
		lineno++;
		if (e->line[0] == '#')
			expo_comment(e, e->line, lineno);
		else if (e->line[0])
			expo_sample(e, e->line, lineno);
		free(e->line);
		e->line = NULL;
		p = nl + 1;
	}
	for (int i = 0; i < e->nfam; i++) {
		if (!e->fam[i].help || !e->fam[i].type[0])
			expo_fail("%s lacks HELP or TYPE", e->fam[i].name);
	}
out:
	free(e->line);
	for (int i = 0; i < e->nseries; i++)
		free(e->series[i]);
	free(e);
	return err;
}

static void check_exposition(const char *text)
{
	const char *err = expo_check(text);
	if (err)
		fail_msg("not a valid exposition: %s", err);
}

/* ---- helpers --------------------------------------------------------------- */

static int ctl_metrics(const char *textfile)
{
	char *argv[] = {(char *)th_env("GPB_CTL"),
	                "--socket",
	                daemon_.socket,
	                "metrics",
	                textfile ? "--textfile" : NULL,
	                (char *)textfile,
	                NULL};
	return th_run(argv, NULL, out, sizeof(out));
}

/* The value of one series ("name" or "name{labels}") in text; -1 when the
 * series is absent. */
static double series_value(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

/* A series' value from a fresh `gpubrokerctl metrics`. */
static double metric(const char *series)
{
	assert_int_equal(ctl_metrics(NULL), 0);
	return series_value(out, series);
}

struct until {
	const char *series;
	double value;
};

static bool metric_is(void *arg)
{
	const struct until *u = arg;
	return metric(u->series) == u->value;
}

/* Polls until a series has a value (a wait reaches the queue, or leaves it). */
static void await_metric(const char *series, double value)
{
	struct until u = {series, value};
	if (!th_wait_for(metric_is, &u, 10000))
		fail_msg("%s stayed at %g, expected %g", series, metric(series), value);
}

struct waiter {
	gpb_client *c;
	uint64_t inst;
	int rc;
	struct gpb_allocation a;
};

static void *waiter_run(void *arg)
{
	struct waiter *w = arg;
	w->rc = gpb_alloc_wait(w->c, w->inst, 6 * MIB, 0, 10000, &w->a);
	return NULL;
}

/* ---- tests ----------------------------------------------------------------- */

/*
 * Waits that time out, are served and are cancelled each move their counter;
 * the user's cap is there; the whole output passes the format check with an
 * instance name that needs escaping.
 */
static void test_format_and_series(void **state)
{
	gpb_client *c = th_client(&daemon_, "metrics");
	struct gpb_register_opts opts = {.name = ODD_NAME, .device = 0};
	uint64_t inst;
	struct gpb_allocation a, none;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	assert_int_equal(gpb_alloc(c, inst, 3 * MIB, 0, &a), 0);

	char series[256];
	snprintf(series, sizeof(series), "gpubroker_uid_cap_bytes{uid=\"%u\"}", (unsigned)getuid());
	assert_true(metric(series) == CAP);
	assert_true(metric("gpubroker_waits_started_total") == 0);

	/* Over the limit until the wait runs out. */
	assert_int_equal(gpb_alloc_wait(c, inst, 6 * MIB, 0, 100, &none), GPB_E_TIMEOUT);
	assert_true(metric("gpubroker_waits_started_total") == 1);
	assert_true(series_value(out, "gpubroker_waits_timed_out_total") == 1);
	assert_true(series_value(out, "gpubroker_waits_served_total") == 0);

	/* Another connection waits until the first frees. */
	struct waiter w = {.c = th_client(&daemon_, "waiter")};
	struct gpb_register_opts wopts = {.name = "waiter", .device = 0};
	assert_int_equal(gpb_register(w.c, &wopts, &w.inst), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, waiter_run, &w), 0);
	await_metric("gpubroker_waiting_allocations", 1);
	assert_int_equal(gpb_free(c, a.id), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 0);
	assert_true(metric("gpubroker_waits_served_total") == 1);
	assert_true(series_value(out, "gpubroker_waiting_allocations") == 0);

	/* A raw connection waits, then goes away: cancelled. */
	int fd = th_connect(daemon_.socket);
	th_hello(fd);
	char reply[4096], req[256];
	assert_true(th_call(fd,
	                    "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"gone\","
	                    "\"device\":0}}",
	                    reply, sizeof(reply)) > 0);
	const char *id = strstr(reply, "\"instance\":\"");
	assert_non_null(id);
	int n = snprintf(req, sizeof(req),
	                 "{\"id\":\"w\",\"method\":\"alloc\",\"params\":{\"instance\":\"%.16s\","
	                 "\"size\":\"%u\",\"wait_ms\":10000}}\n",
	                 id + 12, 4 * MIB);
	assert_int_equal(th_send(fd, req, (size_t)n), 0);
	await_metric("gpubroker_waits_started_total", 3);
	th_close(fd);
	await_metric("gpubroker_waits_cancelled_total", 1);
	assert_true(series_value(out, "gpubroker_waits_timed_out_total") == 1);
	assert_true(series_value(out, "gpubroker_waits_served_total") == 1);
	assert_true(series_value(out, "gpubroker_waiting_allocations") == 0);

	/* Per-instance series: labelled instance_id (Prometheus owns
	 * `instance`), the name escaped. */
	assert_int_equal(ctl_metrics(NULL), 0);
	snprintf(series, sizeof(series),
	         "gpubroker_instance_used_bytes{instance_id=\"%016llx\",name=\"waiter\","
	         "uid=\"%u\",device=\"0\"}",
	         (unsigned long long)w.inst, (unsigned)getuid());
	assert_true(series_value(out, series) == 6 * MIB);
	snprintf(series, sizeof(series),
	         "gpubroker_instance_used_bytes{instance_id=\"%016llx\"," ODD_LABEL
	         ",uid=\"%u\",device=\"0\"}",
	         (unsigned long long)inst, (unsigned)getuid());
	assert_true(series_value(out, series) == 0);
	/* Per device: what the cap is held against on each. */
	snprintf(series, sizeof(series), "gpubroker_uid_used_bytes{uid=\"%u\",device=\"0\"}",
	         (unsigned)getuid());
	assert_true(series_value(out, series) == 6 * MIB);
	snprintf(series, sizeof(series), "gpubroker_uid_used_bytes{uid=\"%u\",device=\"1\"}",
	         (unsigned)getuid());
	assert_true(series_value(out, series) == 0);
	check_exposition(out);

	/* promtool, when installed, agrees. */
	if (access("/usr/bin/promtool", X_OK) == 0) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd),
		         "%s --socket %s metrics | /usr/bin/promtool check metrics",
		         th_env("GPB_CTL"), daemon_.socket);
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};
		assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
	}
	assert_int_equal(gpb_free(w.c, w.a.id), 0);
	gpb_disconnect(w.c);
	gpb_disconnect(c);
}

/* The checker itself refuses what the format forbids. */
static void test_checker_refuses(void **state)
{
	static const char *const bad[] = {
	    "x 1\n",                                             /* no HELP/TYPE */
	    "# HELP x h\n# TYPE x gauge\nx{pid=\"1\"} 1\n",      /* pid label */
	    "# HELP x h\n# TYPE x gauge\nx{instance=\"a\"} 1\n", /* Prometheus' label */
	    "# HELP x h\n# TYPE x counter\nx 1\n",               /* counter without _total */
	    "# HELP x_total h\n# TYPE x_total gauge\nx_total 1\n",
	    "# HELP x h\n# TYPE x gauge\nx{a=\"\\q\"} 1\n", /* bad escape */
	    "# HELP x h\n# TYPE x gauge\nx one\n",          /* not a float */
	    "# HELP x h\n# TYPE x gauge\nx{1a=\"v\"} 1\n",  /* label name */
	    "# HELP x h\n# TYPE x gauge\n# HELP y h\n# TYPE y gauge\nx 1\ny 1\nx{a=\"b\"} 1\n",
	    "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n", /* one series twice */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (!expo_check(bad[i]))
			fail_msg("the checker passed case %zu: %s", i, bad[i]);
	}
	check_exposition("# HELP x h\n# TYPE x gauge\nx{a=\"\\\"\\\\\\n\"} +Inf 1\n");
}

/* --textfile writes the same format, and replaces the file by a rename: a
 * reader of the old file sees it whole, no temporary file is left. */
static void test_textfile(void **state)
{
	char dir[64], path[96];
	snprintf(dir, sizeof(dir), "/tmp/gpb-test-textfile-%d", (int)getpid());
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/gpubroker.prom", dir);
	assert_int_equal(ctl_metrics(path), 0);
	assert_string_equal(out, ""); /* nothing on stdout */
	static char first[sizeof(out)];
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, first, sizeof(first) - 1);
	assert_true(n > 0);
	first[n] = '\0';
	check_exposition(first);
	assert_non_null(strstr(first, "gpubroker_build_info{"));
	struct stat st0, st1;
	assert_int_equal(fstat(fd, &st0), 0);
	assert_int_equal(st0.st_mode & 0777, 0644);

	/* Again, with the old file open. */
	assert_int_equal(ctl_metrics(path), 0);
	assert_int_equal(stat(path, &st1), 0);
	assert_true(st1.st_ino != st0.st_ino);
	static char again[sizeof(out)];
	assert_int_equal(pread(fd, again, sizeof(again) - 1, 0), n);
	again[n] = '\0';
	assert_string_equal(again, first);
	close(fd);
	/* Same families as on stdout. */
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	n = (ssize_t)fread(again, 1, sizeof(again) - 1, f);
	fclose(f);
	again[n] = '\0';
	check_exposition(again);
	assert_int_equal(ctl_metrics(NULL), 0);
	for (char *p = out; (p = strstr(p, "# TYPE ")); p++) {
		char *nl = strchr(p, '\n');
		assert_non_null(nl);
		*nl = '\0';
		if (!strstr(again, p))
			fail_msg("'%s' missing from the textfile", p);
		*nl = '\n';
	}

	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *de;
	int entries = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			assert_string_equal(de->d_name, "gpubroker.prom");
			entries++;
		}
	}
	closedir(d);
	assert_int_equal(entries, 1);
	assert_int_equal(unlink(path), 0);
	/* A directory that does not exist: an error, nothing written. */
	snprintf(path, sizeof(path), "%s/none/gpubroker.prom", dir);
	assert_int_equal(ctl_metrics(path), 1);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_checker_refuses),
	    cmocka_unit_test(test_format_and_series),
	    cmocka_unit_test(test_textfile),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
