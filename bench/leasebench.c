/*
 * leasebench.c - the lease targets (issue 27), through libgpubroker and the
 * real daemon:
 *
 *   P8a  alloc+free from warm leases, one thread, 64 live blocks of
 *        256 B-64 KiB: per-pair p50/p99 against the same pattern with
 *        GPUBROKER_LEASE=0 (one round trip a call) and against the pool
 *        module's own alloc+free at the same live count, all in this run.
 *   P8c  daemon messages per 1000 alloc+free in steady state (the daemon's
 *        own request counters, read over a second connection), for the
 *        opens patterns of P5 and for threads sharing one client; and a
 *        "training step, then a 1.5 s pause" loop: messages and slab opens
 *        per step.
 *   P8d  after a LIFO burst, at the idle setting + 200 ms with no library
 *        call: the bytes leased and kept for the process against its
 *        in-use.
 *   P9   recall latency (issue 28): a process that holds 512 MiB of idle
 *        leases sleeps; another connection's proportion change shrinks its
 *        cap under them; the time until the daemon charges the holder no
 *        more than its new cap (its service thread answered the recall).
 */
#include "bench.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "gpubroker.h"
#include "pool.h"

#define P8A_LIVE    64
#define P8A_MIN     256u
#define P8A_MAX     65536u
#define P8_GRANULE  (2u << 20) /* a lease's granularity: P8d's "one granule" */
#define P8_THREADS  8
#define P8_STEPS    4
#define P8_STEP_LEN 64

/* ---- counting the daemon's messages ------------------------------------------ */

/* The daemon's metrics text (the caller frees it). */
static char *metrics_text(gpb_client *q)
{
	char *json = NULL;
	if (gpb_request(q, "metrics", NULL, &json) < 0)
		bench_die("metrics: %s", gpb_last_error());
	cJSON *root = cJSON_Parse(json);
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
	if (!cJSON_IsString(text))
		bench_die("metrics: no text");
	char *out = strdup(text->valuestring);
	cJSON_Delete(root);
	gpb_string_free(json);
	if (!out)
		bench_die("out of memory");
	return out;
}

/* Every request the daemon answered, but the counting connection's own
 * (method "metrics"). */
static double daemon_requests(gpb_client *q)
{
	static const char series[] = "gpubroker_requests_total{";
	char *text = metrics_text(q);
	double total = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		if (strncmp(line, series, sizeof(series) - 1) != 0 || !sp ||
		    strstr(line, "method=\"metrics\""))
			continue;
		total += strtod(sp + 1, NULL);
	}
	free(text);
	return total;
}

/* A gauge summed over its series (every label set), 0 when absent. */
static double daemon_metric(gpb_client *q, const char *name)
{
	char *text = metrics_text(q);
	double v = 0;
	size_t n = strlen(name);
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, name, n) != 0 || (line[n] != ' ' && line[n] != '{'))
			continue;
		char *sp = strrchr(line, ' ');
		if (sp)
			v += strtod(sp + 1, NULL);
	}
	free(text);
	return v;
}

/* ---- P8a -------------------------------------------------------------------- */

/* bench_lib_open() with leases on (the library's default) or off: the
 * library reads GPUBROKER_LEASE when it connects. */
static void lib_connect(struct bench_lib *l, const char *socket, bool lease)
{
	if (lease)
		unsetenv("GPUBROKER_LEASE");
	else
		setenv("GPUBROKER_LEASE", "0", 1);
	bench_lib_open(l, socket, false);
	unsetenv("GPUBROKER_LEASE");
}

/* Per-pair times (ns) of `pairs` alloc+free pairs over P8A_LIVE live
 * blocks, after as many again to warm the leases; sorted into *p50, *p99. */
static void lib_pairs(const char *socket, bool lease, unsigned pairs, double *p50, double *p99)
{
	struct bench_lib l;
	struct gpb_allocation a;
	uint64_t live[P8A_LIVE];
	struct bench_rng rng = {.s = 27};
	double *t = bench_xmalloc(pairs * sizeof(*t));

	lib_connect(&l, socket, lease);
	for (unsigned i = 0; i < P8A_LIVE; i++) {
		if (gpb_alloc(l.c, l.instance, bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX), 0,
		              &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		live[i] = a.id;
	}
	for (unsigned i = 0; i < 2 * pairs; i++) {
		unsigned k = (unsigned)bench_rng_below(&rng, P8A_LIVE);
		uint64_t size = bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX);
		uint64_t t0 = bench_now_ns();
		if (gpb_free(l.c, live[k]) < 0 || gpb_alloc(l.c, l.instance, size, 0, &a) < 0)
			bench_die("alloc+free: %s", gpb_last_error());
		uint64_t t1 = bench_now_ns();
		live[k] = a.id;
		if (i >= pairs)
			t[i - pairs] = (double)(t1 - t0);
	}
	*p50 = bench_quantile(t, pairs, 0.5);
	*p99 = bench_quantile(t, pairs, 0.99);
	free(t);
	bench_lib_close(&l);
}

static int pool_create_slab(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	(void)ctx;
	(void)uid;
	(void)size;
	*slab = (void *)1;
	return 0;
}

static void pool_destroy_slab(void *ctx, void *slab)
{
	(void)ctx;
	(void)slab;
}

static const struct pool_slab_ops pool_bench_ops = {.create = pool_create_slab,
                                                    .destroy = pool_destroy_slab};

/* The pool module's own pair, the same pattern, timed alike. */
static double pool_pairs_p50(unsigned pairs)
{
	struct pool *pool = pool_create(NULL, &pool_bench_ops, NULL);
	struct pool_block *live[P8A_LIVE];
	struct bench_rng rng = {.s = 27};
	double *t = bench_xmalloc(pairs * sizeof(*t));

	if (!pool)
		bench_die("pool_create failed");
	for (unsigned i = 0; i < P8A_LIVE; i++) {
		if (pool_alloc(pool, 1000, bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX), 0,
		               &live[i]) < 0)
			bench_die("pool_alloc failed");
	}
	for (unsigned i = 0; i < 2 * pairs; i++) {
		unsigned k = (unsigned)bench_rng_below(&rng, P8A_LIVE);
		uint64_t size = bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX);
		uint64_t t0 = bench_now_ns();
		pool_free(pool, live[k]);
		if (pool_alloc(pool, 1000, size, 0, &live[k]) < 0)
			bench_die("pool_alloc failed");
		uint64_t t1 = bench_now_ns();
		if (i >= pairs)
			t[i - pairs] = (double)(t1 - t0);
	}
	double p50 = bench_quantile(t, pairs, 0.5);
	free(t);
	pool_destroy(pool);
	return p50;
}

/* ---- P8c -------------------------------------------------------------------- */

struct churn_arg {
	struct bench_lib *l;
	unsigned pairs, seed;
};

static void *churn_thread(void *p)
{
	struct churn_arg *ca = p;
	struct bench_rng rng = {.s = ca->seed};
	uint64_t live[125];
	struct gpb_allocation a;

	for (unsigned i = 0; i < 125; i++) {
		if (gpb_alloc(ca->l->c, ca->l->instance,
		              bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX), 0, &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		live[i] = a.id;
	}
	for (unsigned i = 0; i < ca->pairs; i++) {
		unsigned k = (unsigned)bench_rng_below(&rng, 125);
		if (gpb_free(ca->l->c, live[k]) < 0 ||
		    gpb_alloc(ca->l->c, ca->l->instance,
		              bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX), 0, &a) < 0)
			bench_die("alloc+free: %s", gpb_last_error());
		live[k] = a.id;
	}
	for (unsigned i = 0; i < 125; i++)
		gpb_free(ca->l->c, live[i]);
	return NULL;
}

/* Messages per 1000 alloc+free of `threads` threads sharing one client,
 * each churning 125 live blocks, after a warm-up pass. */
static double msgs_threads(const char *socket, gpb_client *q, unsigned threads, unsigned pairs)
{
	struct bench_lib l;
	pthread_t tid[P8_THREADS];
	struct churn_arg ca[P8_THREADS];

	lib_connect(&l, socket, true);
	double m0 = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			m0 = daemon_requests(q);
		for (unsigned i = 0; i < threads; i++) {
			ca[i] =
			    (struct churn_arg){&l, pairs / threads, 100 + i + 10 * (unsigned)pass};
			if (pthread_create(&tid[i], NULL, churn_thread, &ca[i]))
				bench_die("pthread_create");
		}
		for (unsigned i = 0; i < threads; i++)
			pthread_join(tid[i], NULL);
	}
	double m1 = daemon_requests(q);
	bench_lib_close(&l);
	return 1000.0 * (m1 - m0) / (double)(pairs / threads * threads);
}

/* Messages per 1000 alloc+free of one P5 pattern, after a warm-up pass. */
static double msgs_pattern(const char *socket, gpb_client *q, enum bench_open_pattern p,
                           unsigned pairs)
{
	struct bench_lib l;
	struct bench_rng rng = {.s = 28};
	unsigned nlive = p == BENCH_CHURN ? 1000 : 0;
	uint64_t *live = bench_xmalloc((nlive + 1) * sizeof(*live));
	struct gpb_allocation a;
	double m0;

	lib_connect(&l, socket, true);
	for (unsigned i = 0; i < nlive; i++) {
		if (gpb_alloc(l.c, l.instance, bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX), 0,
		              &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		live[i] = a.id;
	}
	bench_pattern_run(l.c, l.instance, p, &rng, live, nlive, pairs); /* warm */
	m0 = daemon_requests(q);
	bench_pattern_run(l.c, l.instance, p, &rng, live, nlive, pairs);
	double m1 = daemon_requests(q);
	free(live);
	bench_lib_close(&l);
	return 1000.0 * (m1 - m0) / pairs;
}

/* A training loop: each step allocates P8_STEP_LEN arrays, frees them,
 * and the process then sleeps 1.5 s. Messages and slab opens per step,
 * after the first. */
static void msgs_steps(const char *socket, gpb_client *q, double *msgs, double *opens)
{
	struct bench_lib l;
	struct bench_rng rng = {.s = 29};
	uint64_t ids[P8_STEP_LEN];
	struct gpb_allocation a;
	struct gpb_mapping_stats s0, s1;
	double m0 = 0;

	lib_connect(&l, socket, true);
	for (unsigned step = 0; step < P8_STEPS; step++) {
		if (step == 1) {
			m0 = daemon_requests(q);
			if (gpb_mapping_stats(&s0) < 0)
				bench_die("gpb_mapping_stats: %s", gpb_last_error());
		}
		for (unsigned i = 0; i < P8_STEP_LEN; i++) {
			if (gpb_alloc(l.c, l.instance, bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX),
			              0, &a) < 0)
				bench_die("gpb_alloc: %s", gpb_last_error());
			ids[i] = a.id;
		}
		for (unsigned i = P8_STEP_LEN; i-- > 0;)
			if (gpb_free(l.c, ids[i]) < 0)
				bench_die("gpb_free: %s", gpb_last_error());
		bench_sleep_ns(1500000000ull);
	}
	double m1 = daemon_requests(q);
	if (gpb_mapping_stats(&s1) < 0)
		bench_die("gpb_mapping_stats: %s", gpb_last_error());
	*msgs = (m1 - m0) / (P8_STEPS - 1);
	*opens = (double)(s1.opens - s0.opens) / (P8_STEPS - 1);
	bench_lib_close(&l);
}

/* ---- P8d -------------------------------------------------------------------- */

static unsigned idle_ms(void)
{
	const char *v = getenv("GPUBROKER_LEASE_IDLE_MS");
	return v && *v ? (unsigned)strtoul(v, NULL, 10) : 2000;
}

/* After a LIFO burst (`n` blocks, all but `keep` freed newest first), at
 * the idle setting + 200 ms: the bytes leased and kept for the process
 * (the daemon's gauges) and its in-use. @slow (valgrind: every thread
 * runs emulated, the service thread's wake-up included) gives it up to 10 s
 * more to get under the bound. */
static void idle_after_burst(const char *socket, gpb_client *q, unsigned n, unsigned keep,
                             bool adversarial, bool slow, double *held, double *in_use)
{
	struct bench_lib l;
	struct bench_rng rng = {.s = 30};
	uint64_t *ids = bench_xmalloc(n * sizeof(*ids)), *sizes = bench_xmalloc(n * sizeof(*sizes));
	struct gpb_allocation a;

	lib_connect(&l, socket, true);
	for (unsigned i = 0; i < n; i++) {
		sizes[i] = bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX);
		if (gpb_alloc(l.c, l.instance, sizes[i], 0, &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		ids[i] = a.id;
	}
	*in_use = 0;
	for (unsigned i = n; i-- > 0;) {
		/* The adversary keeps one block of every 32: each pins its lease. */
		bool stays = adversarial ? i % 32 == 0 : i < keep;
		if (stays)
			*in_use += (double)sizes[i];
		else if (gpb_free(l.c, ids[i]) < 0)
			bench_die("gpb_free: %s", gpb_last_error());
	}
	bench_sleep_ns((uint64_t)(idle_ms() + 200) * 1000000ull);
	double bound = *in_use / 8 > P8_GRANULE ? *in_use / 8 : P8_GRANULE;
	for (int tries = 0;; tries++) {
		*held = daemon_metric(q, "gpubroker_device_leased_bytes") +
		        daemon_metric(q, "gpubroker_kept_bytes");
		if (!slow || adversarial || *held <= bound || tries == 100)
			break;
		bench_sleep_ns(100000000ull);
	}
	free(ids);
	free(sizes);
	bench_lib_close(&l);
}

/* ---- P8b-torch (issue 29) ---------------------------------------------------- */

/* How a thread's pairs are made: PyTorch's entry points as PyTorch calls
 * them (c NULL; sim: no stream; they connect through $GPUBROKER_SOCKET),
 * or gpb_alloc_async and gpb_free_async on the legacy stream of client c's
 * instance (the lease allocator alone, shared by the threads). */
struct pair_way {
	gpb_client *c;
	uint64_t instance;
};

static void way_alloc(const struct pair_way *w, uint64_t size, void **ptr, uint64_t *id)
{
	struct gpb_allocation a;

	if (!w->c) {
		if (!(*ptr = gpb_torch_alloc((ssize_t)size, 0, NULL)))
			bench_die("gpb_torch_alloc: %s", gpb_last_error());
		return;
	}
	if (gpb_alloc_async(w->c, w->instance, size, 0, NULL, &a) < 0)
		bench_die("gpb_alloc_async: %s", gpb_last_error());
	*ptr = a.ptr;
	*id = a.id;
}

static void way_free(const struct pair_way *w, void *ptr, uint64_t size, uint64_t id)
{
	if (!w->c)
		gpb_torch_free(ptr, (ssize_t)size, 0, NULL);
	else if (gpb_free_async(w->c, id, NULL) < 0)
		bench_die("gpb_free_async: %s", gpb_last_error());
}

/* The P8a pattern made @w's way: 64 live blocks, @pairs pairs to warm,
 * then (once every thread is at @start, where given) @pairs pairs timed:
 * each pair's time (ns) in @t where given, their total in the result. */
static double way_pairs(const struct pair_way *w, unsigned pairs, unsigned seed,
                        pthread_barrier_t *start, double *t)
{
	void *live[P8A_LIVE];
	uint64_t sizes[P8A_LIVE], ids[P8A_LIVE] = {0}, t0 = 0;
	struct bench_rng rng = {.s = seed};

	for (unsigned i = 0; i < P8A_LIVE; i++) {
		sizes[i] = bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX);
		way_alloc(w, sizes[i], &live[i], &ids[i]);
	}
	for (unsigned i = 0; i < 2 * pairs; i++) {
		if (i == pairs) {
			if (start)
				pthread_barrier_wait(start);
			t0 = bench_now_ns();
		}
		unsigned k = (unsigned)bench_rng_below(&rng, P8A_LIVE);
		uint64_t size = bench_rng_loguniform(&rng, P8A_MIN, P8A_MAX);
		uint64_t a = t ? bench_now_ns() : 0;
		way_free(w, live[k], sizes[k], ids[k]);
		way_alloc(w, size, &live[k], &ids[k]);
		sizes[k] = size;
		if (t && i >= pairs)
			t[i - pairs] = (double)(bench_now_ns() - a);
	}
	double ns = (double)(bench_now_ns() - t0);
	if (start) /* no thread's frees below in another's timed pairs */
		pthread_barrier_wait(start);
	for (unsigned i = 0; i < P8A_LIVE; i++)
		way_free(w, live[i], sizes[i], ids[i]);
	return ns;
}

struct pair_worker {
	pthread_t th;
	const struct pair_way *way;
	unsigned pairs, seed;
	pthread_barrier_t *start;
	double ns;
};

static void *pair_thread(void *p)
{
	struct pair_worker *w = p;
	w->ns = way_pairs(w->way, w->pairs, w->seed, w->start, NULL);
	return NULL;
}

/* Pairs per second of @threads threads at once, @w's way, over one
 * thread's alone, each thread timed from a common start: the median of 3
 * rounds. */
static double way_scaling(const struct pair_way *way, unsigned threads, unsigned pairs)
{
	struct pair_worker w[P8_THREADS];
	double ratio[3];
	pthread_barrier_t start;

	for (unsigned round = 0; round < 3; round++) {
		double one = way_pairs(way, pairs, 99 + round, NULL, NULL), slowest = 0;

		pthread_barrier_init(&start, NULL, threads);
		for (unsigned i = 0; i < threads; i++) {
			w[i] = (struct pair_worker){.way = way,
			                            .pairs = pairs,
			                            .seed = 100 + 10 * round + i,
			                            .start = &start};
			if (pthread_create(&w[i].th, NULL, pair_thread, &w[i]) != 0)
				bench_die("pthread_create");
		}
		for (unsigned i = 0; i < threads; i++) {
			pthread_join(w[i].th, NULL);
			if (w[i].ns > slowest)
				slowest = w[i].ns;
		}
		pthread_barrier_destroy(&start);
		ratio[round] = (threads * (double)pairs / slowest) / ((double)pairs / one);
	}
	return bench_median(ratio, 3);
}

/* The lease allocator alone from threads (gpb_alloc_async/gpb_free_async
 * on one client): what the torch figure's scaling stands on. */
static double lease_scaling(const char *socket, unsigned threads, unsigned pairs)
{
	struct bench_lib l;

	lib_connect(&l, socket, true);
	struct pair_way way = {.c = l.c, .instance = l.instance};
	double scale = way_scaling(&way, threads, pairs);
	bench_lib_close(&l);
	return scale;
}

static void torch_figures(const char *socket, unsigned pairs, struct bench_p8 *out)
{
	double *t = bench_xmalloc(pairs * sizeof(*t));

	setenv("GPUBROKER_SOCKET", socket, 1);
	setenv("GPUBROKER_TORCH_NAME", "gpb-bench-torch", 1);
	const struct pair_way torch = {0};
	way_pairs(&torch, pairs, 29, NULL, t);
	out->torch_p50 = bench_quantile(t, pairs, 0.5);
	free(t);
	out->torch_scale = way_scaling(&torch, out->threads, pairs);
}

void bench_p8(const char *socket, bool quick, bool slow, struct bench_p8 *out)
{
	unsigned pairs = quick ? 2000 : 20000;
	gpb_client *q;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(out, 0, sizeof(*out));
	if (gpb_connect(socket, "gpb-bench-count", &q) < 0)
		bench_die("library: %s", gpb_last_error());
	lib_pairs(socket, true, pairs, &out->lease_p50, &out->lease_p99);
	lib_pairs(socket, false, quick ? 500 : 5000, &out->plain_p50, &out->plain_p99);
	out->pool_p50 = pool_pairs_p50(pairs);
	for (int p = 0; p < BENCH_PATTERNS; p++)
		out->msgs[p] = msgs_pattern(socket, q, (enum bench_open_pattern)p, pairs);
	out->threads = (unsigned)(cpus < P8_THREADS ? (cpus < 1 ? 1 : cpus) : P8_THREADS);
	out->msgs_threads = msgs_threads(socket, q, out->threads, pairs);
	out->lease_scale = lease_scaling(socket, out->threads, pairs);
	msgs_steps(socket, q, &out->step_msgs, &out->step_opens);
	idle_after_burst(socket, q, 512, 8, false, slow, &out->idle_held, &out->idle_in_use);
	idle_after_burst(socket, q, 512, 0, true, slow, &out->adv_held, &out->adv_in_use);
	/* Last: PyTorch's client is the process's for good, and its leases
	 * would count in P8d's daemon-wide figures. */
	torch_figures(socket, pairs, out);
	gpb_disconnect(q);
}

/* ---- P9 --------------------------------------------------------------------- */

#define P9_SLAB  (64ull << 20)
#define P9_BLOCK (16ull << 20)
#define P9_FILL  32 /* blocks of 16 MiB leased and freed: 512 MiB idle */

/* The holder: leases and frees P9_FILL blocks on 'f' and says 'f'; between
 * commands it sleeps in read(), making no library call: its service thread
 * answers the recalls. Exits on 'q' or EOF. */
static void p9_holder(const char *socket, int in, int out)
{
	struct gpb_register_opts o = {.name = "p9-holder"};
	struct gpb_allocation a[P9_FILL];
	gpb_client *c;
	uint64_t inst;
	char cmd;

	/* Only a recall brings its idle leases back, never the idle timer. */
	setenv("GPUBROKER_LEASE_IDLE_MS", "600000", 1);
	unsetenv("GPUBROKER_LEASE");
	if (gpb_connect(socket, "p9-holder", &c) < 0 || gpb_register(c, &o, &inst) < 0)
		bench_die("P9 holder: %s", gpb_last_error());
	if (bench_write_all(out, &inst, sizeof(inst)) < 0)
		_exit(1);
	while (bench_read_all(in, &cmd, 1) == 0 && cmd == 'f') {
		for (unsigned i = 0; i < P9_FILL; i++)
			if (gpb_alloc(c, inst, P9_BLOCK, 0, &a[i]) < 0)
				bench_die("P9 holder: gpb_alloc: %s", gpb_last_error());
		for (unsigned i = 0; i < P9_FILL; i++)
			if (gpb_free(c, a[i].id) < 0)
				bench_die("P9 holder: gpb_free: %s", gpb_last_error());
		if (bench_write_all(out, &cmd, 1) < 0)
			_exit(1);
	}
	gpb_disconnect(c);
	_exit(0);
}

static void p9_info(gpb_client *c, uint64_t inst, struct gpb_instance_info *info)
{
	if (gpb_instance_info(c, inst, info) < 0)
		bench_die("P9: instance_info: %s", gpb_last_error());
}

void bench_p9(const char *path, bool quick, struct bench_p9 *out)
{
	static const char conf_text[] = "mode = active\n";
	char conf[] = "/tmp/gpb-bench-p9-XXXXXX";
	int to[2], from[2], fd = mkstemp(conf);
	if (fd < 0 || bench_write_all(fd, conf_text, sizeof(conf_text) - 1) < 0)
		bench_die("P9: configuration file");
	close(fd);
	const char *extra[] = {"--config", conf, "--sim-memory", "1GiB", "--slab-size",
	                       "64MiB",    NULL};
	struct bench_daemon d;
	bench_daemon_start(&d, path, extra);
	/* The command line, then what the file says (cut if need be). */
	int len = snprintf(out->daemon_cmd, sizeof(out->daemon_cmd), "%s", d.command);
	if (len > 0 && (size_t)len < sizeof(out->daemon_cmd) - 32)
		snprintf(out->daemon_cmd + len, sizeof(out->daemon_cmd) - (size_t)len,
		         "; the file: %s", "mode = active");
	if (pipe(to) < 0 || pipe(from) < 0)
		bench_die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork");
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		p9_holder(d.socket, to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);

	/* The shrinker: an instance of its own in the manual pool, whose
	 * proportion moves between 0.1 and 0.8; the holder (auto) gets the
	 * rest: 0.9 of the device (921 MiB), then 0.2 (204 MiB). */
	struct gpb_register_opts o = {.name = "p9-shrinker", .proportion = 0.1};
	struct gpb_instance_info info;
	gpb_client *c;
	uint64_t mine, holder;
	char step = 'f';
	if (gpb_connect(d.socket, "p9-shrinker", &c) < 0 || gpb_register(c, &o, &mine) < 0)
		bench_die("P9: %s", gpb_last_error());
	if (bench_read_all(from[0], &holder, sizeof(holder)) < 0)
		bench_die("P9: the holder did not start");

	out->iterations = quick ? 50 : 200;
	double *t = bench_xmalloc(out->iterations * sizeof(*t));
	for (unsigned i = 0; i < out->iterations; i++) {
		if (bench_write_all(to[1], &step, 1) < 0 || bench_read_all(from[0], &step, 1) < 0)
			bench_die("P9: the holder did not fill");
		p9_info(c, holder, &info);
		if (info.used <= P9_FILL * P9_BLOCK / 2)
			bench_die("P9: the holder holds %llu bytes", (unsigned long long)info.used);
		uint64_t t0 = bench_now_ns();
		if (gpb_set_proportion(c, mine, 0.8, NULL) < 0)
			bench_die("P9: set_proportion: %s", gpb_last_error());
		do {
			p9_info(c, holder, &info);
			if (bench_now_ns() - t0 > 10000000000ull)
				bench_die("P9: the holder still holds %llu bytes over its cap %llu "
				          "after 10 s",
				          (unsigned long long)info.used,
				          (unsigned long long)info.cap);
		} while (info.used > info.cap);
		t[i] = (double)(bench_now_ns() - t0);
		if (gpb_set_proportion(c, mine, 0.1, NULL) < 0)
			bench_die("P9: set_proportion: %s", gpb_last_error());
	}
	out->p50 = bench_quantile(t, out->iterations, 0.5);
	out->p99 = bench_quantile(t, out->iterations, 0.99);
	out->max = bench_quantile(t, out->iterations, 1.0);
	free(t);
	close(to[1]);
	if (waitpid(pid, NULL, 0) != pid)
		bench_die("P9: waitpid");
	close(from[0]);
	gpb_disconnect(c);
	bench_daemon_stop(&d);
	unlink(conf);
}
