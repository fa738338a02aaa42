/*
 * test-load.c - many concurrent connections, each doing alloc/free pairs
 * through the real library, with zero errors; reports request latency
 * (p50, p99, p99.9, max), throughput and the daemon's memory.
 *
 * GPB_LOAD_CONNECTIONS x GPB_LOAD_PAIRS, default 100 x 100 (every CI run);
 * the figure, 1,000 x 1,000, is tools/reliability.sh's long run
 * (docs/reliability.md has its results). One thread per connection, so
 * every connection has a request in flight at once: on a 2-core machine a
 * thousand client processes would measure the scheduler, not the daemon.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Latency histogram: 2^(b/16) nanoseconds per bucket, about 4% wide. */
#define HIST_SUB     16
#define HIST_BUCKETS (40 * HIST_SUB)

struct hist {
	uint64_t n[HIST_BUCKETS];
	uint64_t count, max_ns;
};

static unsigned hist_bucket(uint64_t ns)
{
	if (ns < 2)
		return 0;
	unsigned lg = 63u - (unsigned)__builtin_clzll(ns);
	/* The HIST_SUB bits below the top one pick the sub-bucket. */
	unsigned sub = lg >= 4 ? (unsigned)(ns >> (lg - 4)) & (HIST_SUB - 1)
	                       : (unsigned)(ns << (4 - lg)) & (HIST_SUB - 1);
	unsigned b = lg * HIST_SUB + sub;
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

/* The upper edge of bucket b, in nanoseconds. */
static double hist_edge(unsigned b)
{
	unsigned lg = b / HIST_SUB, sub = b % HIST_SUB;
	return (double)(1ull << lg) * (1.0 + (sub + 1) / (double)HIST_SUB);
}

static void hist_add(struct hist *h, uint64_t ns)
{
	h->n[hist_bucket(ns)]++;
	h->count++;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

static void hist_merge(struct hist *into, const struct hist *h)
{
	for (unsigned b = 0; b < HIST_BUCKETS; b++)
		into->n[b] += h->n[b];
	into->count += h->count;
	if (h->max_ns > into->max_ns)
		into->max_ns = h->max_ns;
}

/* Microseconds below which a fraction q of the samples fall. */
static double hist_quantile_us(const struct hist *h, double q)
{
	uint64_t want = (uint64_t)(q * (double)h->count), seen = 0;
	for (unsigned b = 0; b < HIST_BUCKETS; b++) {
		seen += h->n[b];
		if (seen > want)
			return hist_edge(b) / 1000.0;
	}
	return (double)h->max_ns / 1000.0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct conn_state {
	gpb_client *c;
	uint64_t inst;
	unsigned pairs;
	unsigned seed;
	struct hist alloc, free;
	int errors;
	int first_error;
	char message[256];
};

static pthread_barrier_t start_line;

static void *conn_thread(void *arg)
{
	struct conn_state *s = arg;
	pthread_barrier_wait(&start_line);
	for (unsigned i = 0; i < s->pairs; i++) {
		struct gpb_allocation a;
		/* 256 B to 64 KiB: several allocations share each slab. */
		uint64_t size = 256u << (rand_r(&s->seed) % 9);
		uint64_t t0 = now_ns();
		int rc = gpb_alloc(s->c, s->inst, size, 0, &a);
		uint64_t t1 = now_ns();
		if (rc == 0) {
			((volatile char *)a.ptr)[0] = 1;
			rc = gpb_free(s->c, a.id);
		}
		uint64_t t2 = now_ns();
		if (rc != 0) {
			if (!s->errors++) {
				s->first_error = rc;
				snprintf(s->message, sizeof(s->message), "%s", gpb_last_error());
			}
			continue;
		}
		hist_add(&s->alloc, t1 - t0);
		hist_add(&s->free, t2 - t1);
	}
	return NULL;
}

/* The daemon's own figures: request_duration_seconds sum and count. */
static void daemon_duration(gpb_client *c, double *sum, double *count)
{
	char *json = NULL;
	assert_int_equal(gpb_request(c, "metrics", NULL, &json), 0);
	const char *p = strstr(json, "gpubroker_request_duration_seconds_sum ");
	const char *q = strstr(json, "gpubroker_request_duration_seconds_count ");
	assert_non_null(p);
	assert_non_null(q);
	*sum = strtod(p + strlen("gpubroker_request_duration_seconds_sum "), NULL);
	*count = strtod(q + strlen("gpubroker_request_duration_seconds_count "), NULL);
	gpb_string_free(json);
}

/* CPU seconds the daemon has used (user + system). */
static double daemon_cpu(const struct th_daemon *d)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)d->pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* After "(comm) ": state is field 3; utime and stime are 14 and 15. */
	const char *p = strrchr(buf, ')');
	assert_non_null(p);
	unsigned long long ut = 0, st = 0;
	assert_int_equal(
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st), 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static unsigned env_uint(const char *name, unsigned dflt)
{
	const char *v = getenv(name);
	unsigned long n = v && *v ? strtoul(v, NULL, 10) : 0;
	return n ? (unsigned)n : dflt;
}

static void test_load(void **state)
{
	unsigned nconn = env_uint("GPB_LOAD_CONNECTIONS", 100);
	unsigned pairs = env_uint("GPB_LOAD_PAIRS", 100);
	/* Descriptors: the daemon needs one per connection and per slab; this
	 * process one per connection (and the library's per slab mapped). */
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	unsigned need = 4 * nconn + 256;
	if (rl.rlim_cur < need) {
		rl.rlim_cur =
		    rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
		if (rl.rlim_cur < need && geteuid() == 0)
			rl.rlim_cur = rl.rlim_max = need;
		setrlimit(RLIMIT_NOFILE, &rl);
		assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < need) {
		printf("# RLIMIT_NOFILE %llu: too low for %u connections\n",
		       (unsigned long long)rl.rlim_cur, nconn);
		skip();
	}
	char clients[16];
	snprintf(clients, sizeof(clients), "%u", nconn + 16);
	const char *extra[] = {
	    "--max-clients", clients, "--max-clients-per-uid", clients, "--log-level",
	    "error",         NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra, .nofile = need};
	th_daemon_start_opts(&d, &o);
	long rss0 = th_daemon_rss_kib(&d);

	struct conn_state *cs = calloc(nconn, sizeof(*cs));
	pthread_t *th = calloc(nconn, sizeof(*th));
	assert_non_null(cs);
	assert_non_null(th);
	uint64_t c0 = now_ns();
	for (unsigned i = 0; i < nconn; i++) {
		cs[i].c = th_client(&d, "load");
		struct gpb_register_opts ro = {.name = "load", .device = (int)(i % 2)};
		assert_int_equal(gpb_register(cs[i].c, &ro, &cs[i].inst), 0);
		cs[i].pairs = pairs;
		cs[i].seed = i;
	}
	uint64_t connected = now_ns() - c0;
	assert_int_equal(pthread_barrier_init(&start_line, NULL, nconn + 1), 0);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (unsigned i = 0; i < nconn; i++)
		assert_int_equal(pthread_create(&th[i], &attr, conn_thread, &cs[i]), 0);
	pthread_attr_destroy(&attr);
	long rss_connected = th_daemon_rss_kib(&d);
	double dsum0, dcount0, dsum1, dcount1;
	daemon_duration(cs[0].c, &dsum0, &dcount0);
	double cpu0 = daemon_cpu(&d);
	pthread_barrier_wait(&start_line);
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < nconn; i++)
		pthread_join(th[i], NULL);
	double secs = (double)(now_ns() - t0) / 1e9;
	pthread_barrier_destroy(&start_line);
	double cpu = daemon_cpu(&d) - cpu0;
	daemon_duration(cs[0].c, &dsum1, &dcount1);

	struct hist all_alloc = {0}, all_free = {0}, all = {0};
	int errors = 0;
	for (unsigned i = 0; i < nconn; i++) {
		if (cs[i].errors && !errors)
			printf("# connection %u: %d errors, the first %s: %s\n", i, cs[i].errors,
			       gpb_strerror(cs[i].first_error), cs[i].message);
		errors += cs[i].errors;
		hist_merge(&all_alloc, &cs[i].alloc);
		hist_merge(&all_free, &cs[i].free);
		hist_merge(&all, &cs[i].alloc);
		hist_merge(&all, &cs[i].free);
	}
	long hwm = th_daemon_status_kib(&d, "VmHWM");
	long rss_end = th_daemon_rss_kib(&d);
	/* Each connection's last free did not wait for its reply, and the
	 * selfcheck below, through connection 0, counts every connection's
	 * allocations: each one's frees done first. */
	for (unsigned i = 0; i < nconn; i++)
		th_settle(cs[i].c);
	struct th_selfcheck sc;
	th_selfcheck(cs[0].c, &sc);
	printf("# load: %u connections x %u alloc/free pairs on %ld CPUs: %llu requests in "
	       "%.2f s = %.0f requests/s (%.0f pairs/s); %d errors\n",
	       nconn, pairs, sysconf(_SC_NPROCESSORS_ONLN), (unsigned long long)all.count, secs,
	       (double)all.count / secs, (double)all_alloc.count / secs, errors);
	printf("# latency (us)   p50      p99      p99.9    max\n");
	static const char *const names[] = {"alloc", "free", "both"};
	const struct hist *hs[] = {&all_alloc, &all_free, &all};
	for (int k = 0; k < 3; k++)
		printf("#   %-6s %9.1f %8.1f %8.1f %8.1f\n", names[k],
		       hist_quantile_us(hs[k], 0.50), hist_quantile_us(hs[k], 0.99),
		       hist_quantile_us(hs[k], 0.999), (double)hs[k]->max_ns / 1000.0);
	printf("# the daemon: %.1f us per request handling it (its own histogram), %.1f us of CPU "
	       "per request (%.0f%% of one core)\n",
	       (dsum1 - dsum0) / (dcount1 - dcount0) * 1e6, cpu / (double)all.count * 1e6,
	       100 * cpu / secs);
	printf("# daemon RSS: %ld KiB at start, %ld KiB with %u connections, %ld KiB after, "
	       "peak %ld KiB; heap %lld bytes; connecting took %.2f s\n",
	       rss0, rss_connected, nconn, rss_end, hwm, sc.heap_bytes, (double)connected / 1e9);
	assert_int_equal(errors, 0);
	assert_int_equal(all_alloc.count, (uint64_t)nconn * pairs);
	assert_int_equal(sc.allocations, 0);
	/* Bounded: a few KiB per connection, not per request (RSS means
	 * nothing under ASan or valgrind: both keep freed memory queued). */
#ifndef __SANITIZE_ADDRESS__
	assert_true(hwm - rss0 < 64 * 1024 + (long)nconn * 64 || th_valgrind());
#endif
	for (unsigned i = 0; i < nconn; i++)
		gpb_disconnect(cs[i].c);
	free(cs);
	free(th);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
